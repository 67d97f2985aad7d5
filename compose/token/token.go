// Package token keeps a Compose project's secret: a random token in a mode-0600 file of the
// state directory. The engine reads it by path (its config names the file) and admits
// registrations into the project's namespace only with it; workers get the file's path in
// III_TOKEN_FILE. The value itself leaves the file through this package only by Value, for the
// III_TOKEN of process workers (0.26 SDKs read the token from III_TOKEN); nothing else returns
// it, and it is never logged or put on a command line.
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
	"strings"

	"github.com/Masterminds/semver/v3"

	"github.com/iii-go/iii/internal/base/privfile"
)

// File names inside the state directory.
const (
	FileName      = "token"
	OwnerFileName = "owner-token"
	metaName      = "token.json"
)

// EnvTokenFile is the variable that hands workers the token file's path.
const EnvTokenFile = "III_TOKEN_FILE"

// EnvToken is the variable that hands a process worker the token's value. VM workers never get
// it: the token stays out of VMs, which get only what their env_file names.
const EnvToken = "III_TOKEN"

// Value reads the token in the file at path (surrounding whitespace trimmed). Its only use is
// EnvToken of a process worker.
func Value(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// Path returns where the token of the project whose state directory is dir lives.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Ensure makes sure the project's token file is safe to use and returns its path; created says
// whether a new token was written. It prints Check's warning, if any, to stderr as
// "warning: ...".
func Ensure(dir string) (path string, created bool, err error) {
	path, created, warning, err := Check(dir)
	if warning != "" {
		fmt.Fprintln(os.Stderr, "warning: "+warning)
	}
	return path, created, err
}

// Check creates the token file when it does not exist, and replaces it (never follows, repairs or
// reuses it) when it cannot be trusted: a symlink, anything but a regular file, a file that group
// or others could read, or an empty one: tightening a file others could read keeps a token they may
// have copied, and following a link would let someone else choose the file. warning says why it
// replaced a file that held something; it never includes the token. A regular, owner-only,
// non-empty file is kept as it is.
func Check(dir string) (path string, created bool, warning string, err error) {
	return keep(Path(dir))
}

// keep implements Check for the token file at path.
func keep(path string) (string, bool, string, error) {
	why, err := untrusted(path)
	if err != nil {
		return "", false, "", err
	}
	if why == "ok" {
		return path, false, "", nil
	}
	if err := write(path); err != nil {
		return "", false, "", err
	}
	warning := ""
	if why != "" {
		warning = fmt.Sprintf("%s %s, so Compose replaced it with a new token (mode 0600); workers get the new one at their next start", path, why)
	}
	return path, true, warning, nil
}

// untrusted inspects the token file without following a link: "ok" for a file to keep, "" for
// one that is missing or empty (write it, nothing to say), else the reason to replace it.
func untrusted(path string) (string, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Sprintf("was a symlink (to %s), which Compose never follows for the token (its target was left untouched)", target), nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		// Swapped for a link or made unreadable since Lstat: replace it.
		return fmt.Sprintf("could not be opened as a plain file (%v)", err), nil
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return "", err
	}
	switch {
	case !st.Mode().IsRegular():
		return fmt.Sprintf("was not a regular file (%v)", st.Mode().Type()), nil
	case st.Size() == 0:
		return "", nil
	case exposedMode(st.Mode()):
		return fmt.Sprintf("was open to group or others (mode %04o): whoever could read it may hold the token, and tightening the mode would not take it back", st.Mode().Perm()), nil
	}
	return "ok", nil
}

// NewOwner writes a fresh owner token for this run of Compose (mode 0600) and returns its path.
// The managed engine grants the owner-only functions (configuration::publish,
// engine::sandbox::bind) to this token alone; workers get the project token, never this one.
func NewOwner(dir string) (string, error) {
	path := OwnerPath(dir)
	return path, write(path)
}

// OwnerPath is where Compose keeps its owner token in the state directory dir.
func OwnerPath(dir string) string { return filepath.Join(dir, OwnerFileName) }

// EnsureOwner returns the owner token Compose presents to an engine it attaches to, creating it
// (mode 0600) when missing and replacing it as Check does when it cannot be trusted. Unlike
// NewOwner it survives across runs: the user's own engine config names the file in its
// namespaces: list (owner_token_file), which grants Compose configuration::publish there. A
// warning, if any, goes to stderr as "warning: ...".
func EnsureOwner(dir string) (path string, err error) {
	path, _, warning, err := keep(OwnerPath(dir))
	if warning != "" {
		fmt.Fprintln(os.Stderr, "warning: "+warning)
	}
	return path, err
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

// write puts a fresh random token into path.
func write(path string) error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	return writeAtomic(path, []byte(hex.EncodeToString(b[:])+"\n"))
}

// writeAtomic is privfile.WriteAtomic: mode 0600, renamed over path, so a link at path is
// replaced, never written through.
func writeAtomic(path string, data []byte) error { return privfile.WriteAtomic(path, data) }

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
	return writeAtomic(filepath.Join(dir, metaName), b)
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
