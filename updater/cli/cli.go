// Package cli is the `iii update` command line: it updates iii from the release tree and, on
// 0.26, says what 0.25 left behind and whether the shell runs the copy it installed. Progress
// goes to stderr, one line per step, in the shape 0.25 printed.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/iii-go/iii/internal/base/platform"
	"github.com/iii-go/iii/updater/errcode"
	"github.com/iii-go/iii/updater/install"
	"github.com/iii-go/iii/updater/release"
	"github.com/iii-go/iii/updater/shadow"
)

const usage = `Usage: iii update [TARGET] [--list-targets]

Update iii to the newest release, installed into ~/.local/bin (BIN_DIR overrides).

  TARGET          what to update: self (or iii); default: everything
  --list-targets  print the targets and exit
  -h, --help      print this help

Environment: III_RELEASE_URL (release tree, file:// or http(s)://), BIN_DIR, III_TARGET.
`

// Run runs `iii update ARGS` with the version of the running binary and returns the exit code.
func Run(version string, args []string, getenv func(string) string) int {
	return run(context.Background(), version, args, os.Stdout, os.Stderr, getenv)
}

// options are the parsed arguments.
type options struct {
	target    string
	list      bool
	help      bool
	positions int
}

func parse(args []string) (options, error) {
	var o options
	for _, a := range args {
		switch {
		case a == "--list-targets":
			o.list = true
		case a == "-h" || a == "--help":
			o.help = true
		case len(a) > 0 && a[0] == '-':
			return o, errcode.Usagef(errcode.InvalidArguments, "unknown flag %s. Run 'iii update --help' for usage.", a)
		default:
			o.target = a
			o.positions++
		}
	}
	if o.positions > 1 {
		return o, errcode.Usagef(errcode.InvalidArguments, "iii update takes at most one TARGET. Run 'iii update --help' for usage.")
	}
	return o, nil
}

func run(ctx context.Context, version string, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	o, err := parse(args)
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	gen := GenerationOf(version)
	if o.help {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if o.list {
		listTargets(stdout, gen)
		return 0
	}
	names, err := gen.Select(o.target)
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	binDir, err := install.Dir(getenv(install.DirEnv))
	if err != nil {
		return errcode.Exit(stderr, err)
	}
	u := &updater{
		stderr: stderr,
		src:    release.From(getenv(release.URLEnv)),
		target: platform.Host(getenv),
		binDir: binDir,
		path:   getenv("PATH"),
	}
	if o.target == "" {
		names = gen.forTarget(names, u.target.Triple)
	}
	if o.target == "" {
		fmt.Fprintln(stderr, "  Checking all binaries for updates...")
	}
	for _, name := range names {
		for _, f := range install.Sweep(filepath.Join(binDir, u.exe(name))) {
			fmt.Fprintf(stderr, "  removed %s, left in %s by an interrupted update\n", f, binDir)
		}
	}
	failed := false
	for _, name := range names {
		current := version
		if name != Self {
			current = shadow.Version(ctx, filepath.Join(binDir, u.exe(name)))
		}
		if err := u.update(ctx, name, current); err != nil {
			fmt.Fprintf(stderr, "  %s\n", errcode.Line(err))
			failed = true
		}
	}
	if gen.Current() {
		home, herr := os.UserHomeDir()
		u.checkShadow(ctx)
		if herr == nil {
			u.reportLeftovers(home)
		}
	}
	if failed {
		return 1
	}
	return 0
}

func listTargets(w io.Writer, gen Generation) {
	fmt.Fprintln(w, "Available targets for `iii update`:")
	fmt.Fprintln(w, "  self (or iii)")
	for _, m := range gen.Managed() {
		if m.Alias != "" {
			fmt.Fprintf(w, "  %s (or %s)\n", m.Name, m.Alias)
		} else {
			fmt.Fprintf(w, "  %s\n", m.Name)
		}
	}
}

// updater updates one binary at a time from one release.
type updater struct {
	stderr   io.Writer
	src      *release.Source
	target   platform.Target
	binDir   string
	path     string // $PATH
	manifest *release.Manifest
	resolved error
}

// exe is the file name of binary name on the target.
func (u *updater) exe(name string) string {
	if u.target.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

// latest returns the manifest of the latest release, read once.
func (u *updater) latest(ctx context.Context) (*release.Manifest, error) {
	if u.manifest == nil && u.resolved == nil {
		v, err := u.src.Resolve(ctx, "latest")
		if err == nil {
			u.manifest, err = u.src.Manifest(ctx, v)
		}
		u.resolved = err
	}
	return u.manifest, u.resolved
}

// update brings binary name, now at version current ("" when not installed), to the latest
// release and prints the progress lines.
func (u *updater) update(ctx context.Context, name, current string) error {
	fmt.Fprintf(u.stderr, "  Checking for updates to %s...\n", name)
	m, err := u.latest(ctx)
	if err != nil {
		return err
	}
	a, ok := m.Find(name, u.target.Triple)
	if !ok {
		return &release.AssetNotFoundError{Target: u.target.Triple, Binary: name}
	}
	if current != "" && !Newer(a.Version, current) {
		fmt.Fprintf(u.stderr, "  ✓ %s is already up to date (v%s)\n", name, current)
		return nil
	}
	if current == "" {
		fmt.Fprintf(u.stderr, "  Installing %s v%s...\n", name, a.Version)
	} else {
		fmt.Fprintf(u.stderr, "  Updating %s to v%s...\n", name, a.Version)
	}
	dest := filepath.Join(u.binDir, u.exe(name))
	data, err := u.src.Fetch(ctx, m.Version, a)
	if err == nil {
		data, err = install.Extract(data, a.Name, u.exe(name))
	}
	if err == nil {
		err = install.Write(dest, data, u.check(ctx, name, a.Version))
	}
	if err != nil {
		var e *errcode.Error
		if errors.As(err, &e) {
			return errcode.New(e.Code, "%s; %s was left untouched", e.Message, dest)
		}
		return err
	}
	if current == "" {
		fmt.Fprintf(u.stderr, "  ✓ %s installed: v%s\n", name, a.Version)
		return nil
	}
	fmt.Fprintf(u.stderr, "  ✓ %s updated: %s → %s\n", name, current, a.Version)
	if name == Self {
		fmt.Fprintln(u.stderr, "  note: iii has been updated. Restart your shell or run the command again to use the new version.")
	}
	return nil
}

// check returns the test a new binary passes before it replaces the installed one: iii itself must
// run `--version` and print the release's version, so an empty or foreign file is never installed.
// Nothing is run for the other binaries, nor when the target is not this machine's OS and
// architecture.
func (u *updater) check(ctx context.Context, name, version string) func(string) error {
	if name != Self || u.target.GOOS != runtime.GOOS || u.target.GOARCH != runtime.GOARCH {
		return nil
	}
	return func(path string) error { return install.CheckVersion(ctx, path, name, version) }
}
