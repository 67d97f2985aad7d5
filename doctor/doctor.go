// Package doctor is `iii doctor`: it reads the host (HOME, III_COMPOSE_STATE_DIR, PATH), a
// project (its compose file, lock and state directory), a config.yaml and, when one answers, the
// engine, and reports every finding of the 0.25 → 0.26 upgrade guide with a stable code, the path
// or key it concerns, what it means and the fix. Every check reuses the code of the command that
// owns it: the updater's leftover list and shadow check, Compose's parser, prepare step, token
// policy and file edits, the engine's config.yaml parser and the adapter's host requirements
// (internal/base/hostreq). Fix applies only the safe fixes: it rewrites the compose file for
// SANDBOX_CONFIG_MOVED and moves leftovers into ~/.iii/trash/<UTC timestamp>/, deleting nothing.
package doctor

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-go/iii/internal/base/platform"
)

// Finding is one problem.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	// Path is the file, directory or key the finding concerns.
	Path    string `json:"path"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
	// Size is the bytes under a leftover path, for LEFTOVER_PATH and OLD_VM_STATE.
	Size int64 `json:"size_bytes,omitempty"`
	// Fixable says `iii doctor --fix` applies the fix.
	Fixable bool `json:"fixable"`
	// movable marks a leftover that Fix moves into the trash.
	movable bool
	// root is the tree a movable leftover was found in (the project's directory,
	// $III_COMPOSE_STATE_DIR, ~/.iii); Fix moves nothing a symbolic link below it leads to.
	root string
}

// Options say what to check.
type Options struct {
	// Home is the home directory (default os.UserHomeDir).
	Home string
	// BinDir is where iii update installs (default $BIN_DIR, else ~/.local/bin).
	BinDir string
	// Exe is the iii that runs (default os.Executable).
	Exe string
	// ComposeFile is the project's compose file, "" for none.
	ComposeFile string
	// ConfigFile is an engine config.yaml, "" for none.
	ConfigFile string
	// Host runs the adapter's host checks even when the project does not need the adapter.
	Host bool
	// Target is the host (default platform.Host of LookupEnv, which honours III_TARGET).
	Target *platform.Target
	// EngineTimeout bounds the attempt to reach the engine (default 1.5 s).
	EngineTimeout time.Duration
	// LookupEnv is the environment (BIN_DIR, III_URL, III_COMPOSE_STATE_DIR, the adapter's
	// III_* and what config.yaml expands): os.LookupEnv in the binary; nil is an empty one.
	LookupEnv func(string) (string, bool)
}

// getenv is o's variable k, "" when unset.
func (o Options) getenv(k string) string {
	if o.LookupEnv == nil {
		return ""
	}
	v, _ := o.LookupEnv(k)
	return v
}

// Report is the outcome of Check.
type Report struct {
	Findings []Finding `json:"findings"`
	// Notes say what was and was not looked at (no compose file, no engine answered, ...).
	Notes []string `json:"notes"`
	// ComposeFile and ConfigFile are what was read ("" for none); EngineURL where the engine was
	// looked for and EngineReached whether it answered.
	ComposeFile   string `json:"compose_file"`
	ConfigFile    string `json:"config_file"`
	EngineURL     string `json:"engine_url"`
	EngineReached bool   `json:"engine_reached"`
}

// ActionNeeded reports whether some finding is an error or a warning.
func (r *Report) ActionNeeded() bool {
	for _, f := range r.Findings {
		if f.Severity != Info {
			return true
		}
	}
	return false
}

// Count returns the number of findings of severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

func (r *Report) add(f Finding) { r.Findings = append(r.Findings, f) }

func (r *Report) note(s string) { r.Notes = append(r.Notes, s) }

// withDefaults fills the unset options from the environment.
func (o Options) withDefaults() (Options, error) {
	if o.Home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return o, err
		}
		o.Home = h
	}
	if o.BinDir == "" {
		if d := o.getenv("BIN_DIR"); d != "" {
			o.BinDir, _ = filepath.Abs(d)
		} else {
			o.BinDir = filepath.Join(o.Home, ".local", "bin")
		}
	}
	if o.Exe == "" {
		if exe, err := os.Executable(); err == nil {
			o.Exe = exe
		}
	}
	if o.Target == nil {
		t := platform.Host(o.getenv)
		o.Target = &t
	}
	if o.LookupEnv == nil {
		o.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if o.EngineTimeout == 0 {
		o.EngineTimeout = 1500 * time.Millisecond
	}
	return o, nil
}

// Check runs every check and returns the findings in a fixed order: binaries and the shell,
// leftovers under ~/.iii, the project, config.yaml, the host, the engine.
func Check(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Report{Notes: []string{}, Findings: []Finding{}, ComposeFile: o.ComposeFile, ConfigFile: o.ConfigFile}
	checkBinaries(ctx, r, o)
	checkHomeLeftovers(r, o)
	p := checkProject(r, o)
	cfg := checkConfig(r, o)
	checkHost(r, o, p)
	checkEngine(ctx, r, o, p, cfg)
	return r, nil
}
