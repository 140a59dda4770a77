// Command kstatus reads one Kubernetes object as JSON on stdin and prints how GitOps tools read
// its health, as JSON.
//
// Default: the kstatus verdict (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute), the library
// Flux, kpt and cli-utils' apply waiters use: {"status": "...", "message": "..."}.
//
// With -flux-current (and optionally -flux-failed, -flux-inprogress): Flux kustomize-controller's
// healthCheckExprs semantics, reimplemented here for tests: a status.observedGeneration that
// differs from metadata.generation is InProgress; otherwise the expressions are evaluated in the
// order inProgress, failed, current against the object's top-level fields, the first true one
// decides, none true means InProgress, and an evaluation error is reported as "Error" (Flux
// keeps waiting until its timeout). The CEL environment uses the options Flux's runtime/cel
// package enables (optional types, strings/sets/encoders extensions, cross-type numeric
// comparisons).
//
// Built by tests/support/kstatus.py.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
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
	current := flag.String("flux-current", "", "Flux healthCheckExprs `current` expression")
	failed := flag.String("flux-failed", "", "Flux healthCheckExprs `failed` expression")
	inProgress := flag.String("flux-inprogress", "", "Flux healthCheckExprs `inProgress` expression")
	flag.Parse()

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
	if *current != "" {
		emit(fluxHealth(obj, *inProgress, *failed, *current))
		return
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		fail(err)
	}
	emit(verdict{Status: res.Status.String(), Message: res.Message})
}

func fluxHealth(obj map[string]interface{}, inProgress, failed, current string) verdict {
	u := &unstructured.Unstructured{Object: obj}
	observed, found, err := unstructured.NestedInt64(obj, "status", "observedGeneration")
	if err == nil && found && observed != u.GetGeneration() {
		return verdict{Status: "InProgress", Message: "observedGeneration differs from generation"}
	}
	for _, e := range []struct{ expr, status string }{
		{inProgress, "InProgress"}, {failed, "Failed"}, {current, "Current"},
	} {
		if e.expr == "" {
			continue
		}
		ok, err := evalBool(e.expr, obj)
		if err != nil {
			return verdict{Status: "Error", Error: err.Error()}
		}
		if ok {
			return verdict{Status: e.status}
		}
	}
	return verdict{Status: "InProgress"}
}

func evalBool(expr string, data map[string]interface{}) (bool, error) {
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	)
	if err != nil {
		return false, err
	}
	ast, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return false, fmt.Errorf("parsing %q: %w", expr, iss.Err())
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return false, err
	}
	val, _, err := prg.ContextEval(context.Background(), data)
	if err != nil {
		return false, fmt.Errorf("evaluating %q: %w", expr, err)
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%q is not boolean", expr)
	}
	return bool(b), nil
}

func emit(v verdict) {
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
	if v.Status == "Error" {
		os.Exit(2)
	}
}

func fail(err error) {
	emit(verdict{Status: "Error", Error: err.Error()})
}
