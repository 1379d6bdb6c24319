// Command controller is cert-manager's controller for CAPTF's tests, built by
// hack/build-tools.sh (component cert-manager) as bin/cert-manager-controller.
//
// The Go module proxy serves github.com/cert-manager/cert-manager but not
// upstream's cmd/controller (a nested module), so this is a small main of our
// own around the root module's pkg/controller: the same controllers, informers,
// leader election lease and health endpoint as upstream's, configured by the
// flags the static install manifest passes.
//
// Which controllers: those SelfSigned and CA Issuers/ClusterIssuers need, out
// of cert-manager's default enabled list (internal/apis/config/controller/
// v1alpha1.DefaultEnabledControllers): not ACME (orders, challenges,
// certificaterequests-issuer-acme), Vault or Venafi. The full list cannot be
// built from the proxy at all: it lacks Venafi's SDK (github.com/Venafi/vcert/
// v5 v5.13.7: "403 ... not available"), which that config package imports
// too, so its defaults are written out below. Adding ACME + Vault (measured
// with the SDK-free rest) costs ~320 more packages from 63 more modules (AWS,
// Azure, Google, ... DNS SDKs for the challenge solvers, Vault's API), +18 MB
// of binary and a cold compile of 164 s instead of 115 s (niced, 2 cores),
// for issuers the tests cannot use (no ACME server, no Vault). The Issuer,
// Certificate, CertificateRequest and approver controllers are upstream's,
// unchanged, so Certificates with SelfSigned/CA issuers behave as in a stock
// cert-manager; an Issuer of another type never gets Ready (the issuers
// controller logs "issuer 'acme' not registered" and retries).
//
// What runs is whatever registered itself in controller.Known() through the
// blank imports below (each package's init calls controller.Register).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cert-manager/cert-manager/captf-testbins/internal/command"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/healthz"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// Issuers and ClusterIssuers (their Ready condition) and the issuer types
	// they know: SelfSigned and CA.
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	// Certificates: trigger, key manager, request manager, issuing,
	// readiness, revision manager, and the certmanager_certificate_* metrics.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/metrics"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	// CertificateRequests: the approver and the SelfSigned and CA signers.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	// Ingress annotations (default-enabled upstream, no extra dependencies).
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
)

func main() {
	command.Main("controller", run)
}

func run(ctx context.Context) error {
	// Upstream defaults (internal/apis/config/controller/v1alpha1/defaults.go).
	opts := controller.ContextOptions{
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace:        "kube-system",
			ClusterIssuerAmbientCredentials: true,
		},
		IngressShimOptions: controller.IngressShimOptions{
			DefaultIssuerKind:                 "Issuer",
			DefaultIssuerGroup:                "cert-manager.io",
			DefaultAutoCertificateAnnotations: []string{"kubernetes.io/tls-acme"},
		},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	}
	logging := logsapi.NewLoggingConfiguration()
	leaderElect, leaderNamespace := true, "kube-system"
	metricsAddr, healthzAddr := "0.0.0.0:9402", "0.0.0.0:9403"
	workers := 5

	fs := pflag.NewFlagSet("cert-manager-controller", pflag.ExitOnError)
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&opts.ClusterResourceNamespace, "cluster-resource-namespace", opts.ClusterResourceNamespace,
		"namespace of the Secrets that ClusterIssuers refer to")
	fs.BoolVar(&leaderElect, "leader-elect", leaderElect, "run only while holding the Lease <leader-election-namespace>/cert-manager-controller")
	fs.StringVar(&leaderNamespace, "leader-election-namespace", leaderNamespace, "namespace of the leader election Lease")
	fs.StringVar(&metricsAddr, "metrics-listen-address", metricsAddr, "host:port of the Prometheus /metrics endpoint; 0 disables it")
	fs.StringVar(&healthzAddr, "internal-healthz-listen-address", healthzAddr, "host:port of the /livez endpoint")
	fs.IntVar(&workers, "concurrent-workers", workers, "workers per controller")
	// Accepted because the static manifest passes them; only ACME uses them.
	fs.StringVar(&opts.HTTP01SolverImage, "acme-http01-solver-image", "", "unused: ACME is not built in")
	fs.IntVar(&opts.MaxConcurrentChallenges, "max-concurrent-challenges", 60, "unused: ACME is not built in")
	showVersion := fs.Bool("version", false, "print the cert-manager version and exit")
	logf.AddFlags(logging, fs) // --v, --vmodule, --logging-format, ...
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(util.AppVersion)
		return nil
	}
	if err := logf.ValidateAndApply(logging); err != nil {
		return err
	}
	log := logf.Log.WithName("controller")
	ctx, cancel := context.WithCancel(logf.NewContext(ctx, log))
	defer cancel()
	log.Info("starting cert-manager controller", "version", util.AppVersion, "git_commit", util.AppGitCommit)

	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	shared, err := factory.Build() // its informer factories and metrics are everyone's
	if err != nil {
		return err
	}
	// Construct every registered controller now: constructors only set up
	// informers, listers and queues (and metrics collectors, which the metrics
	// server registers when it is created), they write nothing.
	names := make([]string, 0, len(controller.Known()))
	for name := range controller.Known() {
		names = append(names, name)
	}
	sort.Strings(names)
	controllers := make([]controller.Interface, len(names))
	for i, name := range names {
		if controllers[i], err = controller.Known()[name](factory); err != nil {
			return fmt.Errorf("constructing controller %s: %w", name, err)
		}
	}

	// /livez fails once the leader election stops renewing (its WatchDog).
	health := healthz.NewServer(20 * time.Second)
	var servers errgroup.Group
	serve := func(addr string, start func(net.Listener) error) error {
		ln, err := net.Listen("tcp", addr) // here, so a busy port fails at once
		if err != nil {
			return err
		}
		servers.Go(func() error { return start(ln) })
		return nil
	}
	if err := serve(healthzAddr, func(ln net.Listener) error { return health.Start(ctx, ln) }); err != nil {
		return err
	}
	if metricsAddr != "0" {
		err := serve(metricsAddr, func(ln net.Listener) error {
			srv := shared.Metrics.NewServer(ln)
			go func() { <-ctx.Done(); _ = srv.Close() }()
			if err := srv.Serve(ln); ctx.Err() == nil {
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
	}

	runControllers := func(ctx context.Context) error {
		// One failing controller stops all; a stop asked for (ctx ended) is no
		// error, even if it came before the informers had synced.
		g, gctx := errgroup.WithContext(ctx)
		for i, c := range controllers {
			log.Info("starting controller", "controller", names[i])
			g.Go(func() error {
				if err := c.Run(workers, gctx); err != nil && ctx.Err() == nil {
					return fmt.Errorf("controller %s: %w", names[i], err)
				}
				return nil
			})
		}
		// Each Run waits for the informers its constructor asked for.
		shared.KubeSharedInformerFactory.Start(gctx.Done())
		shared.SharedInformerFactory.Start(gctx.Done())
		shared.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
		return g.Wait()
	}
	if leaderElect {
		err = leaderElectAndRun(ctx, shared, leaderNamespace, health, runControllers)
	} else {
		err = runControllers(ctx)
	}
	cancel() // stops the servers too
	return errors.Join(err, servers.Wait())
}

// leaderElectAndRun runs fn while holding the Lease cert-manager-controller
// (the name the static manifest's Role grants), with upstream's default
// timings. Losing the lease is an error (the process exits, as upstream).
func leaderElectAndRun(ctx context.Context, c *controller.Context, namespace string, health *healthz.Server, fn func(context.Context) error) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, "cert-manager-controller",
		c.Client.CoreV1(), c.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: host + "_" + uuid.NewString(), EventRecorder: c.Recorder})
	if err != nil {
		return err
	}
	var leading atomic.Bool
	done := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   60 * time.Second,
		RenewDeadline:   40 * time.Second,
		RetryPeriod:     15 * time.Second,
		ReleaseOnCancel: true,
		WatchDog:        health.LeaderHealthzAdaptor,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { leading.Store(true); done <- fn(ctx) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	elector.Run(ctx) // until ctx ends or the lease is lost; fn's ctx ends with it
	if !leading.Load() {
		return nil // stopped while waiting for the lease
	}
	err = <-done
	if ctx.Err() == nil {
		return errors.Join(errors.New("lost the leader election lease"), err)
	}
	return err
}
