// Package cli is the `iii compose` command line.
package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/daemon"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/pkginstall"
	"github.com/iii-go/iii/compose/registry"
	"github.com/iii-go/iii/compose/serve"
	"github.com/iii-go/iii/compose/supervisor"
)

// Run runs `iii compose ARGS` and returns the process exit code.
func Run(version string, args []string) int {
	if supervisor.IsReaper() {
		return supervisor.RunReaper(os.Stdin)
	}
	o := serve.Options{Version: version, File: "worker-compose.yaml"}
	fileSet, frozen := false, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() string {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
				return v
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch name, _, _ := strings.Cut(a, "="); name {
		case "--up":
			o.Up = true
		case "--frozen":
			frozen = true
		case "-f", "--file":
			o.File, fileSet = val(), true
		case "-n", "--namespace":
			o.Namespace = val()
		case "--engine":
			o.EngineURL = val()
		default:
			return fail(errcode.New(errcode.UsageError, "unknown argument %q; usage: iii compose [--engine URL] [-n NS] [--up [-f FILE] [--frozen]]", a))
		}
	}
	if fileSet && !o.Up {
		return fail(errcode.New(errcode.FileRequiresUp, "-f/--file works only with --up"))
	}
	if frozen && !o.Up {
		return fail(errcode.New(errcode.FrozenRequiresUp, "--frozen works only with --up"))
	}
	cache, err := registry.CacheDir()
	if err != nil {
		return fail(err)
	}
	inst := &pkginstall.Installer{Cache: cache, Out: os.Stdout}
	o.PackageCache = cache
	o.Deps = daemon.Deps{Load: func(path string) (*composefile.File, error) { return composefile.Load(path, nil) }, Install: inst.Install}
	if err := serve.Run(context.Background(), o); err != nil {
		return fail(err)
	}
	return 0
}

func fail(err error) int {
	e := errcode.As(err, errcode.IOError)
	fmt.Fprintf(os.Stderr, "error[%s]: %s\n", e.Code, e.Message)
	return 1
}
