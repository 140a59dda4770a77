package main

// `localkube kube-router-netpol`: kube-router's NetworkPolicy controller
// (github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol), upstream's engine
// unchanged, wired here on its own: no BGP routing, no IPVS service proxy, no load-balancer
// allocator. Embedding it (as k3s does) compiles it against the same Kubernetes libraries as
// the rest of localkube instead of a second, older copy in a kube-router module of its own.
//
// The wiring mirrors what upstream's pkg/cmd does for --run-firewall alone: shared informers for
// pods, namespaces and NetworkPolicies, the controller's constructor and Run loop, and
// upstream's health controller serving /healthz on --health-port (200 while the policy
// controller's heartbeats arrive within its sync period). Flags are upstream's own
// definitions, the subset that concerns the policy controller.

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// netpolFlags are the names, in upstream's options.KubeRouterConfig.AddFlags, of what the
// policy controller (and its health check) reads; --v and the other logging flags come from
// component-base, as for every localkube component.
var netpolFlags = []string{
	"kubeconfig", "master", "hostname-override",
	"service-cluster-ip-range", "service-external-ip-range", "loadbalancer-ip-range",
	"service-node-port-range", "enable-ipv4", "enable-ipv6",
	"iptables-sync-period", "cache-sync-timeout", "health-port",
}

// heartbeats buffered between the controller and the health check, as upstream
const healthChanLen = 10

func newNetpolCommand() *cobra.Command {
	config := options.NewKubeRouterConfig()
	cmd := &cobra.Command{
		Use:          "kube-router-netpol",
		Short:        "kube-router's NetworkPolicy controller alone (iptables + ipset, this node's pods)",
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runNetpol(config)
		},
	}
	all := pflag.NewFlagSet("kube-router", pflag.ContinueOnError)
	config.AddFlags(all)
	for _, name := range netpolFlags {
		f := all.Lookup(name)
		if f == nil {
			panic("kube-router has no flag --" + name)
		}
		cmd.Flags().AddFlag(f)
	}
	// the one controller this command runs: what upstream's health check watches
	config.RunFirewall, config.RunRouter, config.RunServiceProxy, config.RunLoadBalancer = true, false, false, false
	config.MetricsEnabled = false
	return cmd
}

func runNetpol(config *options.KubeRouterConfig) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("kube-router-netpol needs root to run iptables and ipset")
	}
	var restConfig *rest.Config
	var err error
	if config.Master != "" || config.Kubeconfig != "" {
		restConfig, err = clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	} else {
		restConfig, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("client configuration: %w", err)
	}
	restConfig.UserAgent = "kube-router-netpol (localkube)"
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	var wg sync.WaitGroup
	stopCh := make(chan struct{})
	healthChan := make(chan *healthcheck.ControllerHeartbeat, healthChanLen)

	hc, err := healthcheck.NewHealthController(config)
	if err != nil {
		return fmt.Errorf("health controller: %w", err)
	}
	wg.Add(1)
	go hc.RunServer(stopCh, &wg)

	factory := informers.NewSharedInformerFactory(client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	nsInformer := factory.Core().V1().Namespaces().Informer()
	npInformer := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stopCh)
	synced := make(chan struct{})
	go func() {
		factory.WaitForCacheSync(stopCh)
		close(synced)
	}()
	select {
	case <-synced:
	case <-time.After(config.CacheSyncTimeout):
		close(stopCh)
		return fmt.Errorf("informer caches not synced after %s", config.CacheSyncTimeout)
	}

	hc.SetAlive()
	wg.Add(1)
	go hc.RunCheck(healthChan, stopCh, &wg)

	var ipsetMutex sync.Mutex
	iptablesHandlers, ipsetHandlers, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		close(stopCh)
		return fmt.Errorf("iptables handlers: %w", err)
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, podInformer, npInformer, nsInformer,
		&ipsetMutex, iptablesHandlers, ipsetHandlers)
	if err != nil {
		close(stopCh)
		return fmt.Errorf("network policy controller: %w", err)
	}
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{podInformer, npc.PodEventHandler},
		{nsInformer, npc.NamespaceEventHandler},
		{npInformer, npc.NetworkPolicyEventHandler},
	} {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			close(stopCh)
			return fmt.Errorf("event handler: %w", err)
		}
	}
	wg.Add(1)
	go npc.Run(healthChan, stopCh, &wg)
	klog.InfoS("kube-router NetworkPolicy controller running", "node", config.HostnameOverride,
		"healthPort", config.HealthPort)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	klog.Info("shutting down")
	close(stopCh)
	wg.Wait()
	return nil
}
