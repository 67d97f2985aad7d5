package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	composeerr "github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/internal/base/errcode"
)

const usage = `Usage: iii doctor [-f worker-compose.yaml] [--config config.yaml] [--json] [--fix] [--host]

Checks this machine and a project against the 0.25 → 0.26 upgrade guide and prints one finding
per problem: a stable code, the path or key it concerns, what it means and the fix.

  -f, --file FILE    the compose file (default ./worker-compose.yaml when it exists); its lock
                     and state directory are read too
  --config FILE      an engine config.yaml (default ./config.yaml when it exists)
  --json             print {"findings":[...],"summary":{...}} instead of text
  --fix              apply the safe fixes: rewrite the compose file for SANDBOX_CONFIG_MOVED and
                     move leftovers (LEFTOVER_*, OLD_VM_STATE) into ~/.iii/trash/<UTC time>/,
                     deleting nothing; then check again
  --host             run the sandbox adapter's host checks even when the project does not need it
  -h, --help         print this help

The engine is asked about a stored iii-sandbox configuration entry only when one answers at the
project's address (engine.url, config.yaml's port, $III_URL, or ws://127.0.0.1:49134).
Exit status: 0 when nothing needs action, 1 when something does, 2 on a usage error.
Environment: HOME, PATH, BIN_DIR, III_COMPOSE_STATE_DIR, III_URL, III_TARGET.
`

// DefaultComposeFile and DefaultConfigFile are read from the current directory when present.
const (
	DefaultComposeFile = "worker-compose.yaml"
	DefaultConfigFile  = "config.yaml"
)

// cliOptions are the parsed arguments.
type cliOptions struct {
	file, config          string
	json, fix, host, help bool
}

func parse(args []string) (cliOptions, error) {
	var o cliOptions
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) || args[i+1] == "" {
				return "", fmt.Errorf("%s needs a file. Run 'iii doctor --help' for usage", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch {
		case a == "-h" || a == "--help":
			o.help = true
		case a == "--json":
			o.json = true
		case a == "--fix":
			o.fix = true
		case a == "--host":
			o.host = true
		case name == "-f" || name == "--file":
			o.file, err = value()
		case name == "--config":
			o.config, err = value()
		case strings.HasPrefix(a, "-"):
			err = fmt.Errorf("unknown flag %s. Run 'iii doctor --help' for usage", a)
		default:
			err = fmt.Errorf("iii doctor takes no arguments, got %q. Run 'iii doctor --help' for usage", a)
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// fileArg makes a named file absolute and checks it exists; unnamed, it takes def from the
// current directory when it exists.
func fileArg(named, flag, def string) (string, error) {
	if named == "" {
		if st, err := os.Stat(def); err == nil && !st.IsDir() {
			return filepath.Abs(def)
		}
		return "", nil
	}
	abs, err := filepath.Abs(named)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s %s: no such file", flag, named)
	}
	return abs, nil
}

// Run runs `iii doctor ARGS` and returns the exit code.
func Run(args []string, lookupEnv func(string) (string, bool)) int {
	return run(context.Background(), args, os.Stdout, os.Stderr, Options{LookupEnv: lookupEnv}, time.Now)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, o Options, now func() time.Time) int {
	co, err := parse(args)
	if err != nil {
		return errcode.Exit(stderr, errcode.Usagef(Usage, "%w", err), Usage)
	}
	if co.help {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if o.ComposeFile, err = fileArg(co.file, "-f", DefaultComposeFile); err == nil {
		o.ConfigFile, err = fileArg(co.config, "--config", DefaultConfigFile)
	}
	if err != nil {
		return errcode.Exit(stderr, errcode.Usagef(Usage, "%w", err), Usage)
	}
	o.Host = co.host
	r, err := Check(ctx, o)
	if err != nil {
		return errcode.Exit(stderr, errcode.New(composeerr.IOError, "%w", err), composeerr.IOError)
	}
	var fixed *FixResult
	if co.fix {
		if fixed, err = Fix(r, o, now()); err == nil {
			r, err = Check(ctx, o)
		}
		if err != nil {
			return errcode.Exit(stderr, errcode.New(composeerr.IOError, "%w", err), composeerr.IOError)
		}
		if !canScan() && len(fixed.Actions) > 0 {
			r.note("this OS has no /proc, so --fix could not check whether a running process holds what it moved")
		}
	}
	if co.json {
		printJSON(stdout, r, fixed)
	} else {
		printText(stdout, r, fixed)
	}
	if r.ActionNeeded() {
		return 1
	}
	return 0
}

// Summary is the last part of the JSON output.
type Summary struct {
	Errors        int    `json:"errors"`
	Warnings      int    `json:"warnings"`
	Info          int    `json:"info"`
	ActionNeeded  bool   `json:"action_needed"`
	ComposeFile   string `json:"compose_file"`
	ConfigFile    string `json:"config_file"`
	EngineURL     string `json:"engine_url"`
	EngineReached bool   `json:"engine_reached"`
}

func summary(r *Report) Summary {
	return Summary{Errors: r.Count(Error), Warnings: r.Count(Warning), Info: r.Count(Info), ActionNeeded: r.ActionNeeded(),
		ComposeFile: r.ComposeFile, ConfigFile: r.ConfigFile, EngineURL: r.EngineURL, EngineReached: r.EngineReached}
}

func printJSON(w io.Writer, r *Report, fixed *FixResult) {
	out := struct {
		Findings []Finding  `json:"findings"`
		Notes    []string   `json:"notes"`
		Fix      *FixResult `json:"fix,omitempty"`
		Summary  Summary    `json:"summary"`
	}{r.Findings, r.Notes, fixed, summary(r)}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
}

func indent(s, pad string) string {
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}

func printText(w io.Writer, r *Report, fixed *FixResult) {
	if fixed != nil {
		for _, a := range fixed.Actions {
			switch a.Did {
			case "rewrote":
				fmt.Fprintf(w, "fixed[%s]: rewrote %s: the iii-sandbox block is now the sandbox-libkrun container's config_override\n", a.Code, a.Path)
			case "moved":
				fmt.Fprintf(w, "fixed[%s]: moved %s to %s\n", a.Code, a.Path, a.To)
			default:
				fmt.Fprintf(w, "refused[%s]: left %s in place: %s\n", a.Code, a.Path, a.Why)
			}
		}
		if fixed.Restore != "" {
			fmt.Fprintf(w, "Nothing was deleted. To move everything back: sh %s\n", fixed.Restore)
		}
		if len(fixed.Actions) > 0 {
			fmt.Fprintln(w)
		}
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "%s[%s]: %s\n", f.Severity, f.Code, f.Path)
		fmt.Fprintln(w, indent(f.Message, "  "))
		fmt.Fprintln(w, indent("fix: "+f.Fix, "  "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	s := summary(r)
	engine := "not reached"
	if s.EngineReached {
		engine = "reached"
	}
	verdict := "nothing needs action"
	if s.ActionNeeded {
		verdict = "action needed"
		if fixable(r) {
			verdict += " (iii doctor --fix applies the safe fixes: leftovers to the trash, the compose file rewritten)"
		}
	}
	fmt.Fprintf(w, "iii doctor: %s, %s, %d info; engine at %s %s; %s\n", count(s.Errors, "error"), count(s.Warnings, "warning"), s.Info, s.EngineURL, engine, verdict)
}

func fixable(r *Report) bool {
	for _, f := range r.Findings {
		if f.Fixable {
			return true
		}
	}
	return false
}

// count renders n and noun, plural unless n is 1: "1 error", "2 warnings".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
