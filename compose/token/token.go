// Package token keeps a Compose project's secret: a random token in a mode-0600 file of the
// state directory. The engine reads it by path (its config names the file) and admits
// registrations into the project's namespace only with it; workers get the file's path in
// III_TOKEN_FILE. The value itself never leaves the file through this package: no function
// returns it.
//
// The package also carries the token policy of the adapter upgrade (req B9, B10): warnings for
// adapters that leak the token, a record that a leaking VM worker ran, and the replacement of
// the token on the first `iii compose --up` with an adapter that no longer leaks it.
package token

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/Masterminds/semver/v3"
)

// File names inside the state directory.
const (
	FileName      = "token"
	OwnerFileName = "owner-token"
	metaName      = "token.json"
)

// EnvTokenFile is the variable that hands workers the token file's path.
const EnvTokenFile = "III_TOKEN_FILE"

// Path returns where the token of the project whose state directory is dir lives.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Ensure creates the token file when it does not exist and returns its path; created says
// whether a new token was written. An existing file is tightened to mode 0600.
func Ensure(dir string) (path string, created bool, err error) {
	path = Path(dir)
	st, err := os.Stat(path)
	if err == nil {
		if st.Size() == 0 {
			return path, true, write(path)
		}
		return path, false, os.Chmod(path, 0o600)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	return path, true, write(path)
}

// NewOwner writes a fresh owner token for this run of Compose (mode 0600) and returns its path.
// The managed engine grants the owner-only functions (configuration::publish,
// engine::sandbox::bind) to this token alone; workers get the project token, never this one.
func NewOwner(dir string) (string, error) {
	path := filepath.Join(dir, OwnerFileName)
	return path, write(path)
}

// Replace writes a new token over the old one (atomically, mode 0600) and forgets any record
// that the old one was exposed.
func Replace(dir string) error {
	if err := write(Path(dir)); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(dir, metaName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func write(path string) error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token.tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(hex.EncodeToString(b[:]) + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Exposure records that the current token was readable by a VM worker (req B10).
type Exposure struct {
	Container      string `json:"container"`
	AdapterVersion string `json:"adapter_version"`
}

// MarkExposed records that container ran as a VM worker able to read the token under an adapter
// of version adapterVersion. The first record is kept.
func MarkExposed(dir, container, adapterVersion string) error {
	if _, ok, err := exposed(dir); err != nil || ok {
		return err
	}
	b, err := json.Marshal(Exposure{Container: container, AdapterVersion: adapterVersion})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, metaName), b, 0o600)
}

func exposed(dir string) (Exposure, bool, error) {
	var e Exposure
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if errors.Is(err, os.ErrNotExist) {
		return e, false, nil
	}
	if err != nil {
		return e, false, err
	}
	// An unreadable record still means the token was exposed.
	_ = json.Unmarshal(b, &e)
	return e, true, nil
}

// Version thresholds of the adapter's token handling.
var (
	firstSafe  = semver.MustParse("0.3.1")
	firstNoObs = semver.MustParse("0.3.0")
)

// ObserversCanRead reports whether adapter version v lets observers read the token (0.2.x, req B9).
func ObserversCanRead(v string) bool {
	sv, err := semver.NewVersion(v)
	return err == nil && sv.LessThan(firstNoObs)
}

// VMMountsExpose reports whether adapter version v lets a VM worker whose directory holds the
// compose file read the token (before 0.3.1, req B10).
func VMMountsExpose(v string) bool {
	sv, err := semver.NewVersion(v)
	return err == nil && sv.LessThan(firstSafe)
}

// RangeFix says how to move the adapter off 0.2 to the engine's contract range (req B8): the
// manual edit and a restart, or a bare compose::update.
const RangeFix = "move to version '^0.3' (stop Compose, change the range, run iii compose --up, or run iii call compose::update)"

// ObserversProblem says that adapter version v lets observers read the token (req B9).
func ObserversProblem(adapter, v string) string {
	return fmt.Sprintf("%s %s: observers can read the project token", adapter, v)
}

// ObserversWarning is ObserversProblem with its fix, RangeFix.
func ObserversWarning(adapter, v string) string {
	return ObserversProblem(adapter, v) + "; " + RangeFix
}

// ExposedProblem says that VM worker container mounts the compose file's directory under
// adapter version v and can read the token (req B10).
func ExposedProblem(adapter, v, container string) string {
	return fmt.Sprintf("%s %s: VM worker '%s' mounts the directory of the compose file and can read "+
		"the project token; its disk keeps those bytes", adapter, v, container)
}

// ExposedWarning is ExposedProblem with its fix, ExposedFix.
func ExposedWarning(adapter, v, container string) string {
	return ExposedProblem(adapter, v, container) + ". " + ExposedFix(adapter)
}

// ExposedFix is the guide's fix for a token a VM worker could read: an adapter of 0.3.1 or later,
// then `iii compose --up`, which replaces the token (updating or restarting the adapter keeps it).
func ExposedFix(adapter string) string {
	return fmt.Sprintf("Move to %s 0.3.1 or later and run iii compose --up, which replaces the token", adapter)
}

// Warnings returns the documented warnings for running adapter version v; exposing lists the
// containers that are path:// VM workers whose directory holds the compose file.
func Warnings(adapter, v string, exposing []string) []string {
	var out []string
	if ObserversCanRead(v) {
		out = append(out, ObserversWarning(adapter, v))
	}
	if VMMountsExpose(v) {
		for _, c := range exposing {
			out = append(out, ExposedWarning(adapter, v, c))
		}
	}
	return out
}

// Exposed returns the record that a VM worker could read the current token of the project whose
// state directory is dir, if there is one: the token has not been replaced since.
func Exposed(dir string) (Exposure, bool, error) { return exposed(dir) }

// RotateIfExposed replaces the token when a VM worker could read it under an older adapter and
// the adapter is now at v >= 0.3.1. Call it only from `iii compose --up`: updating or
// restarting the adapter keeps the token. It returns a message to print when it replaced it.
func RotateIfExposed(dir, adapter, v string) (string, error) {
	e, ok, err := exposed(dir)
	if err != nil || !ok || VMMountsExpose(v) {
		return "", err
	}
	if _, err := semver.NewVersion(v); err != nil {
		return "", nil
	}
	if err := Replace(dir); err != nil {
		return "", err
	}
	return fmt.Sprintf("replaced the project token: VM worker '%s' could read it under %s %s; %s %s keeps it out of VM mounts",
		e.Container, adapter, e.AdapterVersion, adapter, v), nil
}
