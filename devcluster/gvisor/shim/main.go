// Command containerd-shim-runsc-v1 is the devcluster's containerd shim for gVisor (the `cube`
// RuntimeClass): gVisor's own shim service, started by a Start of our own.
//
// Why it exists: gVisor's shim manager (gvisor.dev/gvisor/pkg/shim/v1/manager.go, Start) sets
// the oom_score_adj of the shim daemon it spawns to -999 and fails the whole start when that is
// refused. Lowering a score below 0 needs CAP_SYS_RESOURCE, which our machines do not have, so
// every runsc container failed with EACCES and no option turns that off. Here Name, Stop and
// Info stay gVisor's; only Start is ours, and it raises the daemon's score to containerd's + 1
// with shim.AdjustOOMScore, as containerd's runc shim does
// (github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager/manager_linux.go).
//
// Start groups a pod's containers into one shim, and that needs one more fix: see shutdownReply.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/containerd/ttrpc"
	gvshim "gvisor.dev/gvisor/pkg/shim/v1"
	_ "gvisor.dev/gvisor/pkg/shim/v1/plugin" // registers gVisor's task service with the shim library
)

// sandboxAnnotation is set by containerd's CRI on every container of a pod to the pod sandbox's
// id; containers sharing it share one shim, which suits runsc: a pod is one gVisor sandbox.
const sandboxAnnotation = "io.kubernetes.cri.sandbox-id"

func main() {
	registry.Register(&plugin.Registration{
		Type:   plugins.TTRPCPlugin,
		ID:     "shutdown-reply",
		InitFn: func(*plugin.InitContext) (interface{}, error) { return shutdownReply{}, nil },
	})
	shim.Run(context.Background(), manager{gvshim.NewShimManager("io.containerd.runsc.v1")})
}

// shutdownReply fixes the reply to Shutdown. While the shim still serves other containers of the
// pod, gVisor's Shutdown (pkg/shim/v1/service.go, shimRedirector.Shutdown) keeps the shim alive
// but answers with a nil message and no error, which ttrpc cannot send ("ttrpc: marshal called
// with nil"); containerd 2.4 then fails the container's task Delete ("failed to invoke shutdown",
// core/runtime/v2/shim.go, shimTask.delete). An empty reply is what containerd expects there.
type shutdownReply struct{}

func (shutdownReply) UnaryServerInterceptor() ttrpc.UnaryServerInterceptor {
	return func(ctx context.Context, u ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, m ttrpc.Method) (interface{}, error) {
		resp, err := m(ctx, u)
		if empty, _ := resp.(*ptypes.Empty); err == nil && empty == nil && info.FullMethod == "/containerd.task.v2.Task/Shutdown" {
			return &ptypes.Empty{}, nil
		}
		return resp, err
	}
}

// manager is gVisor's shim.Manager with Start replaced.
type manager struct{ shim.Manager }

// Start runs in the bundle directory as `containerd-shim-runsc-v1 -id ID ... start`: it starts
// (or reuses) the long-lived shim daemon for the container's pod and tells containerd its address.
func (manager) Start(ctx context.Context, id string, opts shim.StartOpts) (_ shim.BootstrapParams, retErr error) {
	// The shim speaks task API v2 over ttrpc (gVisor's pkg/shim/v1/service.go registers task/v2).
	params := shim.BootstrapParams{Version: 2, Protocol: "ttrpc"}

	group, err := podGroup(id)
	if err != nil {
		return params, err
	}
	address, err := shim.SocketAddress(ctx, opts.Address, group, false)
	if err != nil {
		return params, err
	}
	params.Address = address

	listener, err := shim.NewSocket(address)
	if err != nil {
		if !shim.SocketEaddrinuse(err) {
			return params, fmt.Errorf("create shim socket: %w", err)
		}
		if shim.CanConnect(address) {
			// Another container of this pod already started the daemon: it serves this one too.
			return params, writeAddress(address)
		}
		// A dead shim's socket file: take its place.
		if err := shim.RemoveSocket(address); err != nil {
			return params, fmt.Errorf("remove stale shim socket: %w", err)
		}
		if listener, err = shim.NewSocket(address); err != nil {
			return params, fmt.Errorf("create shim socket again: %w", err)
		}
	}
	// On success the listener is left open on purpose: closing it would unlink the socket file
	// that the daemon now serves; this process exits right after.
	defer func() {
		if retErr != nil {
			listener.Close()
			_ = shim.RemoveSocket(address)
		}
	}()
	// The daemon reads ./address to remove its socket when it shuts down (gVisor's
	// NewShimRedirector), and containerd reads it when it reconnects after a restart.
	if err := writeAddress(address); err != nil {
		return params, err
	}
	socket, err := listener.File()
	if err != nil {
		return params, err
	}
	defer socket.Close()

	cmd, err := daemonCommand(ctx, id, opts)
	if err != nil {
		return params, err
	}
	cmd.ExtraFiles = []*os.File{socket} // fd 3: the shim library serves on it
	if err := cmd.Start(); err != nil {
		return params, fmt.Errorf("start shim daemon: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
		}
	}()
	go cmd.Wait() //nolint:errcheck // reaps the daemon should it die before we exit

	if err := shim.WritePidFile("shim.pid", cmd.Process.Pid); err != nil {
		return params, err
	}
	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		return params, fmt.Errorf("adjust shim OOM score: %w", err)
	}
	return params, nil
}

// podGroup names the shim that serves container id: its pod sandbox's, else its own.
func podGroup(id string) (string, error) {
	data, err := os.ReadFile("config.json") // the OCI spec, in the bundle directory
	if err != nil {
		return "", err
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", fmt.Errorf("read config.json: %w", err)
	}
	if group := spec.Annotations[sandboxAnnotation]; group != "" {
		return group, nil
	}
	return id, nil
}

// daemonCommand is this binary re-run without an action, which makes the shim library serve.
func daemonCommand(ctx context.Context, id string, opts shim.StartOpts) (*exec.Cmd, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-namespace", ns, "-id", id, "-address", opts.Address}
	if opts.Debug {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	// Few Go threads per shim, as gVisor's manager does: a node runs one per pod.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	// Its own process group, so signals sent to containerd's group do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

func writeAddress(address string) error {
	return os.WriteFile("address", []byte(address), 0o644)
}
