// Command kstatus reads one Kubernetes object as JSON on stdin and prints the kstatus verdict
// (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute) as JSON: {"status": "...", "message": "..."}.
//
// It exists so Python tests can check that RolloutBatch status is read the way Flux, kpt and
// `kubectl apply --wait`-style tools read it. Built by tests/support/kstatus.py.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(fmt.Errorf("reading stdin: %w", err))
	}
	obj := map[string]interface{}{}
	// The apimachinery decoder turns whole numbers into int64, as the API server's clients do;
	// encoding/json would give float64 and Compute would reject metadata.generation.
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		fail(fmt.Errorf("decoding object: %w", err))
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		fail(err)
	}
	out, _ := json.Marshal(verdict{Status: res.Status.String(), Message: res.Message})
	fmt.Println(string(out))
}

func fail(err error) {
	out, _ := json.Marshal(verdict{Status: "Error", Error: err.Error()})
	fmt.Println(string(out))
	os.Exit(2)
}
