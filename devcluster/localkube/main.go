// Command localkube is a multi-call binary holding the real Kubernetes control-plane
// components, built from the upstream Go modules (no fork, no vendored copy).
//
// The first argument picks the component, exactly as busybox does:
//
//	localkube etcd ...                      etcd server (go.etcd.io/etcd/server/v3)
//	localkube kube-apiserver ...            k8s.io/kubernetes/cmd/kube-apiserver
//	localkube kube-controller-manager ...   k8s.io/kubernetes/cmd/kube-controller-manager
//	localkube kube-scheduler ...            k8s.io/kubernetes/cmd/kube-scheduler
//	localkube kubectl ...                   k8s.io/kubectl (client of the same version)
//	localkube kube-proxy ...                k8s.io/kubernetes/cmd/kube-proxy (one per node netns)
//	localkube kubelet ...                   k8s.io/kubernetes/cmd/kubelet (the real node: one per
//	                                        node, beside that node's containerd)
//	localkube coredns ...                   github.com/coredns/coredns, only the plugins the
//	                                        cluster DNS uses (it shares client-go with the rest)
//	localkube kube-router-netpol ...        kube-router's NetworkPolicy controller alone
//	                                        (github.com/cloudnativelabs/kube-router/v2, netpol.go)
//
// A symlink named after a component works too (argv[0] dispatch). Each component runs as its
// own OS process: running several in one process trips upstream's one-signal-handler panic
// and the "logging configuration was already applied" check.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // as upstream kube-apiserver: CronJob time zones without system tzdata

	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

const usage = "usage: localkube etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kube-proxy|kubelet|coredns|kube-router-netpol|kubectl [flags]"

func main() {
	sub, args := filepath.Base(os.Args[0]), os.Args[1:]
	if sub == "localkube" {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		sub, args = os.Args[1], os.Args[2:]
	}
	var cmd *cobra.Command
	switch sub {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
		return
	case "kube-apiserver":
		cmd = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		cmd = kcm.NewControllerManagerCommand()
	case "kube-scheduler":
		cmd = scheduler.NewSchedulerCommand()
	case "kube-proxy":
		cmd = proxy.NewProxyCommand()
	case "kubelet":
		cmd = kubelet.NewKubeletCommand(context.Background())
	case "coredns":
		// coremain parses the standard flag set, i.e. os.Args[1:]
		os.Args = append([]string{"coredns"}, args...)
		flag.CommandLine.Init("coredns", flag.ExitOnError)
		coremain.Run()
		return
	case "kube-router-netpol":
		cmd = newNetpolCommand()
	case "kubectl":
		cmd = kubectlcmd.NewDefaultKubectlCommand()
	default:
		fmt.Fprintf(os.Stderr, "localkube: unknown component %q\n%s\n", sub, usage)
		os.Exit(2)
	}
	cmd.SetArgs(args)
	os.Exit(cli.Run(cmd))
}
