// Package command is what the three mains share: cert-manager's own exit
// handler and logs around the command's run function.
package command

import (
	"context"

	cmdutil "github.com/cert-manager/cert-manager/internal/cmd/util"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// Main runs run until it returns. SIGTERM/SIGINT cancel its context and end in
// exit code 0 once all stopped; a second signal exits at once. An error is
// logged as "cert-manager <name> failed" and sets the exit code.
func Main(name string, run func(context.Context) error) {
	ctx, exit := cmdutil.SetupExitHandler(context.Background(), cmdutil.GracefulShutdown)
	defer exit() // deferred first, so it runs last: after FlushLogs
	logf.InitLogs()
	defer logf.FlushLogs()
	if err := run(ctx); err != nil {
		logf.Log.Error(err, "cert-manager "+name+" failed")
		cmdutil.SetExitCode(err)
	}
}
