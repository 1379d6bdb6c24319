// Command webhook is cert-manager's admission webhook for CAPTF's tests, built
// by hack/build-tools.sh (component cert-manager) as bin/cert-manager-webhook.
//
// The Go module proxy does not serve upstream's cmd/webhook (a nested module),
// but everything it does lives in the root module: the flags and their
// defaults (pkg/webhook/options), their validation and the server with the
// validating/mutating admission chain (internal/webhook). This main only wires
// them together. So the static manifest's flags work as upstream: --v,
// --secure-port, --dynamic-serving-ca-secret-{namespace,name},
// --dynamic-serving-dns-names (repeated), plus --kubeconfig; /healthz and
// /livez are served on --healthz-port (default 6080), and /healthz fails until
// a serving certificate exists.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/cert-manager/cert-manager/captf-testbins/internal/command"
	"github.com/cert-manager/cert-manager/internal/apis/config/webhook/validation"
	"github.com/cert-manager/cert-manager/internal/webhook"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
	"github.com/cert-manager/cert-manager/pkg/webhook/options"
)

func main() {
	command.Main("webhook", run)
}

func run(ctx context.Context) error {
	// The defaulted v1alpha1 WebhookConfiguration, then the flags over it.
	cfg, err := options.NewWebhookConfiguration()
	if err != nil {
		return err
	}
	fs := pflag.NewFlagSet("cert-manager-webhook", pflag.ExitOnError)
	options.AddConfigFlags(fs, cfg)
	showVersion := fs.Bool("version", false, "print the cert-manager version and exit")
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println(util.AppVersion)
		return nil
	}
	if errs := validation.ValidateWebhookConfiguration(cfg, nil); len(errs) > 0 {
		return errs.ToAggregate()
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return err
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return err
	}
	log := logf.Log.WithName("webhook")
	ctx = logf.NewContext(ctx, log)
	log.Info("starting cert-manager webhook", "version", util.AppVersion, "git_commit", util.AppGitCommit)

	srv, err := webhook.NewCertManagerWebhookServer(log, *cfg)
	if err != nil {
		return err
	}
	return srv.Run(ctx) // until ctx ends
}
