// Package state is a Compose project's state directory: where it lives, the owner-only files in
// it (state.json, engine-config.yaml, the project token) and the per-worker log paths.
//
// The directory is <compose dir>/.iii/compose/<namespace>/, or
// $III_COMPOSE_STATE_DIR/<slug>/<namespace>/ when that variable is set, where <slug> is the
// compose directory's name followed by the first 8 hex digits of the SHA-256 of the canonical
// compose file path, as iii's Compose names it (req J6).
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// EnvStateDir relocates every project's state (and the package cache) when set.
const EnvStateDir = "III_COMPOSE_STATE_DIR"

// File and directory names inside a state directory.
const (
	StateFile        = "state.json"
	EngineConfigFile = "engine-config.yaml"
	EngineLogFile    = "engine.log"
	LogsDir          = "logs"
	ConfigDir        = "config"
	// LegacyVMDir is 0.25's VM state; nothing in 0.26 reads it (req J1).
	LegacyVMDir = "vm"
)

// Dir is one project's state directory.
type Dir struct {
	// Path is the absolute directory.
	Path string
	// ComposeFile is the canonical (absolute, symlinks resolved) compose file path.
	ComposeFile string
	// Namespace is the project namespace.
	Namespace string
}

// Resolve returns the state directory of the compose file in namespace, under stateDir
// ($III_COMPOSE_STATE_DIR) when that is set. It does not create anything.
func Resolve(composeFile, namespace, stateDir string) (Dir, error) {
	canon, err := Canonical(composeFile)
	if err != nil {
		return Dir{}, err
	}
	base := filepath.Join(filepath.Dir(canon), ".iii", "compose")
	if root := stateDir; root != "" {
		abs, err := filepath.Abs(root)
		if err != nil {
			return Dir{}, err
		}
		base = filepath.Join(abs, Slug(canon))
	}
	return Dir{Path: filepath.Join(base, namespace), ComposeFile: canon, Namespace: namespace}, nil
}

// Canonical returns the absolute path of file with symlinks resolved in its directory.
func Canonical(file string) (string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// Slug is the project's directory name under $III_COMPOSE_STATE_DIR: the compose directory's
// base name, a dash, and 8 hex digits of the SHA-256 of the canonical compose path.
func Slug(canonicalFile string) string {
	sum := sha256.Sum256([]byte(canonicalFile))
	return filepath.Base(filepath.Dir(canonicalFile)) + "-" + hex.EncodeToString(sum[:4])
}

// Ensure creates the directory and its logs/ and config/ subdirectories, owner-only.
func (d Dir) Ensure() error {
	for _, p := range []string{d.Path, d.Join(LogsDir), d.Join(ConfigDir)} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// Join returns a path inside the directory.
func (d Dir) Join(elem ...string) string {
	return filepath.Join(append([]string{d.Path}, elem...)...)
}

// LogPath is the log file of a container's process (stdout and stderr interleaved).
func (d Dir) LogPath(container string) string { return d.Join(LogsDir, container+".log") }

// ConfigPath is the resolved configuration file handed to a container as III_CONFIG.
func (d Dir) ConfigPath(container string) string { return d.Join(ConfigDir, container+".yaml") }

// WriteEngineConfig writes engine-config.yaml owner-only and returns its path.
func (d Dir) WriteEngineConfig(data []byte) (string, error) {
	p := d.Join(EngineConfigFile)
	return p, WriteFileAtomic(p, data, 0o600)
}

// RemoveEngineConfig deletes engine-config.yaml after a clean shutdown.
func (d Dir) RemoveEngineConfig() error {
	err := os.Remove(d.Join(EngineConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Child is the record of one process Compose started.
type Child struct {
	Container string    `json:"container"`
	PID       int       `json:"pid"`
	Status    string    `json:"status"`
	StartedAt time.Time `json:"started_at"`
	LastError string    `json:"last_error,omitempty"`
}

// Record is the content of state.json.
type Record struct {
	DaemonPID int              `json:"daemon_pid"`
	Engine    *Child           `json:"engine,omitempty"`
	Children  map[string]Child `json:"children"`
	// VMs are the VM containers whose adapter-owned state may exist (container key to vm_id),
	// so that one removed from the file while Compose was stopped is cleaned up on the next run.
	VMs map[string]string `json:"vms,omitempty"`
}

// ErrInvalidStateFile wraps a state.json that does not parse.
var ErrInvalidStateFile = errors.New("invalid state file")

// Load reads state.json; a missing file is an empty record.
func (d Dir) Load() (Record, error) {
	r := Record{Children: map[string]Child{}}
	b, err := os.ReadFile(d.Join(StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %s: %w", ErrInvalidStateFile, d.Join(StateFile), err)
	}
	if r.Children == nil {
		r.Children = map[string]Child{}
	}
	return r, nil
}

// Save writes state.json atomically, owner-only.
func (d Dir) Save(r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(d.Join(StateFile), append(b, '\n'), 0o600)
}

// WriteFileAtomic writes data to a temporary file beside path with mode perm, syncs it and
// renames it over path, so readers see the old or the new content, never a mix.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}
