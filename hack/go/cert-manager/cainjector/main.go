// Command cainjector is cert-manager's CA injector for CAPTF's tests, built by
// hack/build-tools.sh (component cert-manager) as bin/cert-manager-cainjector.
//
// The Go module proxy does not serve upstream's cmd/cainjector (a nested
// module). Its reconcilers are in the root module (pkg/controller/cainjector:
// they copy a CA into the caBundle of annotated webhook configurations,
// APIServices and conversion-webhook CRDs); this main gives them a
// controller-runtime manager, configured from the root module's defaulted
// CAInjectorConfiguration and the flags the static manifest passes: --v,
// --leader-election-namespace, plus --leader-elect and --kubeconfig.
// Unlike upstream's main (which reads only $KUBECONFIG), --kubeconfig is used.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cert-manager/cert-manager/captf-testbins/internal/command"
	config "github.com/cert-manager/cert-manager/internal/apis/config/cainjector"
	configscheme "github.com/cert-manager/cert-manager/internal/apis/config/cainjector/scheme"
	"github.com/cert-manager/cert-manager/internal/apis/config/cainjector/validation"
	"github.com/cert-manager/cert-manager/internal/kube"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	configv1alpha1 "github.com/cert-manager/cert-manager/pkg/apis/config/cainjector/v1alpha1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	command.Main("cainjector", run)
}

func run(ctx context.Context) error {
	// Upstream's defaults: the v1alpha1 defaulting funcs, converted to the
	// internal type (leader election on, kube-system, 60s/40s/15s; all four
	// injectable kinds; Certificates as a CA source; metrics on :9402).
	cfgScheme, _, err := configscheme.NewSchemeAndCodecs()
	if err != nil {
		return err
	}
	versioned := &configv1alpha1.CAInjectorConfiguration{}
	cfgScheme.Default(versioned)
	cfg := &config.CAInjectorConfiguration{}
	if err := cfgScheme.Convert(versioned, cfg, nil); err != nil {
		return err
	}

	fs := pflag.NewFlagSet("cert-manager-cainjector", pflag.ExitOnError)
	fs.StringVar(&cfg.KubeConfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.BoolVar(&cfg.LeaderElectionConfig.Enabled, "leader-elect", cfg.LeaderElectionConfig.Enabled,
		"run only while holding the Lease <leader-election-namespace>/cert-manager-cainjector-leader-election")
	fs.StringVar(&cfg.LeaderElectionConfig.Namespace, "leader-election-namespace", cfg.LeaderElectionConfig.Namespace,
		"namespace of the leader election Lease")
	fs.StringVar(&cfg.MetricsListenAddress, "metrics-listen-address", cfg.MetricsListenAddress,
		"host:port of the Prometheus /metrics endpoint; 0 disables it")
	showVersion := fs.Bool("version", false, "print the cert-manager version and exit")
	logf.AddFlags(&cfg.Logging, fs) // --v, --vmodule, --logging-format, ...
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(util.AppVersion)
		return nil
	}
	if errs := validation.ValidateCAInjectorConfiguration(cfg, nil); len(errs) > 0 {
		return errs.ToAggregate()
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return err
	}
	log := logf.Log.WithName("cainjector")
	ctrl.SetLogger(log)
	ctx = logf.NewContext(ctx, log)
	log.Info("starting cert-manager cainjector", "version", util.AppVersion, "git_commit", util.AppGitCommit)

	restCfg, err := kube.BuildClientConfig("", cfg.KubeConfig)
	if err != nil {
		return err
	}
	restCfg = util.RestConfigWithUserAgent(restCfg, "cainjector")

	// The kinds it reads and patches.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiext.AddToScheme, apireg.AddToScheme, cmapi.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	le := cfg.LeaderElectionConfig
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsListenAddress},
		LeaderElection:                le.Enabled,
		LeaderElectionNamespace:       le.Namespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &le.LeaseDuration,
		RenewDeadline:                 &le.RenewDeadline,
		RetryPeriod:                   &le.RetryPeriod,
		// The reconcilers watch Secrets as metadata only (builder.OnlyMetadata)
		// and read the CA data with uncached Gets: no cache of whole Secrets.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	inj := cfg.EnableInjectableConfig
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    cfg.Namespace,
		IgnoreNamespaces:             cfg.IgnoreNamespaces,
		EnableCertificatesDataSource: cfg.EnableDataSourceConfig.Certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   inj.MutatingWebhookConfigurations,
			cainjector.ValidatingWebhookConfigurationName: inj.ValidatingWebhookConfigurations,
			cainjector.APIServiceName:                     inj.APIServices,
			cainjector.CustomResourceDefinitionName:       inj.CustomResourceDefinitions,
		},
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx) // until ctx ends
}
