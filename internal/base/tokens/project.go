// Project tokens: how `iii call` finds the token of the Compose project it talks to, from any
// directory, without reading a token it does not own. While Compose serves a project it keeps one
// file per engine address and namespace in ~/.iii/compose/tokens/ (the directory mode 0700, each
// file mode 0600, both owned by the user), named <host>_<port>_<namespace>, holding JSON {pid,
// engine, namespace, token_file}: the path of the project token file, never the token. Compose
// writes it atomically before it registers compose::* and removes it when it stops; a file left by
// a Compose that was killed names a dead pid, is ignored by LookupProject and swept by the next Publish.
//
// LookupProject trusts only what the user alone could have written: the directory and the file must
// not be symlinks, must belong to the user and must not be readable by group or others, and so
// must the token file they name. Anything else is refused with the reason (never the token).

package tokens

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/internal/base/privfile"
	"github.com/iii-go/iii/internal/base/procgroup"
)

// ProjectDir is where the files live, relative to the home directory.
const ProjectDir = ".iii/" + iiidir.ProjectTokensDir

// maxEntry bounds the size of a file LookupProject reads.
const maxEntry = 4096

// The variables through which the SDK takes a token itself (the Go SDK's protocol.EnvTokenFile
// and protocol.EnvToken): a client that has one uses it, not Compose's record.
const (
	envTokenFile = "III_TOKEN_FILE"
	envToken     = "III_TOKEN"
)

// ProjectEntry is the content of one file.
type ProjectEntry struct {
	PID       int    `json:"pid"`
	Engine    string `json:"engine"`
	Namespace string `json:"namespace"`
	TokenFile string `json:"token_file"`
}

// ProjectDirPath returns ~/.iii/compose/tokens (HOME honoured).
func ProjectDirPath() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, filepath.FromSlash(ProjectDir)), nil
}

// ProjectKey returns the file name for an engine URL (ws:// or wss://) and namespace: the engine's
// urlKey, then _<namespace> escaped for a file name.
func ProjectKey(engineURL, namespace string) (string, error) {
	addr, err := urlKey(engineURL)
	if err != nil {
		return "", err
	}
	if namespace == "" {
		namespace = "default"
	}
	return addr + "_" + url.QueryEscape(namespace), nil
}

// Publish records, for the user, that tokenFile is the token of the project this process
// serves in namespace on the engine at engineURL. It sweeps files of dead Compose processes
// first. remove deletes the file unless another Compose has replaced it since.
func Publish(engineURL, namespace, tokenFile string) (path string, remove func() error, err error) {
	key, err := ProjectKey(engineURL, namespace)
	if err != nil {
		return "", nil, err
	}
	dir, err := ProjectDirPath()
	if err != nil {
		return "", nil, err
	}
	if err := privfile.EnsureDir(dir); err != nil {
		return "", nil, err
	}
	sweepProjects(dir)
	abs, err := filepath.Abs(tokenFile)
	if err != nil {
		return "", nil, err
	}
	me := os.Getpid()
	data, _ := json.Marshal(ProjectEntry{PID: me, Engine: engineURL, Namespace: namespace, TokenFile: abs})
	path = filepath.Join(dir, key)
	if err := privfile.WriteAtomic(path, data); err != nil {
		return "", nil, err
	}
	remove = func() error {
		e, err := readProject(path)
		if err != nil || e.PID != me {
			return nil // gone, or another Compose serves it now
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return path, remove, nil
}

// Held reports whether another live Compose process's record for engineURL and namespace is
// in place. Compose publishes before it registers
// compose::* only when nothing else holds the record, so a second daemon refused for the same
// namespace never replaces (and then removes) the serving one's.
func Held(engineURL, namespace string) bool {
	key, err := ProjectKey(engineURL, namespace)
	if err != nil {
		return false
	}
	dir, err := ProjectDirPath()
	if err != nil {
		return false
	}
	e, err := readProject(filepath.Join(dir, key))
	return err == nil && e.PID > 0 && e.PID != os.Getpid() && procgroup.Alive(e.PID)
}

// sweepProjects removes the files of Compose processes that no longer run.
func sweepProjects(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range ents {
		p := filepath.Join(dir, de.Name())
		if privfile.IsTemp(de.Name()) {
			continue
		}
		if e, err := readProject(p); err == nil && e.PID > 0 && !procgroup.Alive(e.PID) {
			_ = os.Remove(p)
		}
	}
}

// ErrNoProjectToken means no live Compose recorded a token for this engine and namespace.
var ErrNoProjectToken = errors.New("no token recorded for this engine and namespace")

// LookupProject returns the project token that the Compose serving namespace on the engine at
// engineURL recorded for this user, and the path of the file that named it. ErrNoProjectToken when there
// is none (or its Compose no longer runs); any other error says why a file was not trusted.
func LookupProject(engineURL, namespace string) (token, path string, err error) {
	key, err := ProjectKey(engineURL, namespace)
	if err != nil {
		return "", "", err
	}
	dir, err := ProjectDirPath()
	if err != nil {
		return "", "", ErrNoProjectToken
	}
	path = filepath.Join(dir, key)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "", path, ErrNoProjectToken
	}
	if err := privfile.Check(dir, true); err != nil {
		return "", path, err
	}
	if err := privfile.Check(path, false); err != nil {
		return "", path, err
	}
	e, err := readProject(path)
	if err != nil {
		return "", path, fmt.Errorf("%s: %w", path, err)
	}
	if e.PID <= 0 || !procgroup.Alive(e.PID) {
		return "", path, ErrNoProjectToken
	}
	if !filepath.IsAbs(e.TokenFile) {
		return "", path, fmt.Errorf("%s: token_file %q is not an absolute path", path, e.TokenFile)
	}
	if err := privfile.Check(e.TokenFile, false); err != nil {
		return "", path, err
	}
	b, err := os.ReadFile(e.TokenFile)
	if err != nil {
		return "", path, err
	}
	token = strings.TrimSpace(string(b))
	if token == "" {
		return "", path, fmt.Errorf("%s is empty", e.TokenFile)
	}
	return token, path, nil
}

// ForCLI is the token a command-line client presents to the engine at engineURL for namespace:
// the one Compose recorded for this user, unless III_TOKEN_FILE or III_TOKEN names one (the SDK
// reads those itself) in getenv, the client's environment; "" when there is none. A record that
// cannot be trusted is ignored, with a line on warn saying why.
func ForCLI(engineURL, namespace string, getenv func(string) string, warn io.Writer) string {
	if getenv(envTokenFile) != "" || getenv(envToken) != "" {
		return ""
	}
	tok, _, err := LookupProject(engineURL, namespace)
	if err != nil {
		if !errors.Is(err, ErrNoProjectToken) {
			fmt.Fprintf(warn, "warning: not using the project token Compose recorded for %s namespace %s: %v\n", engineURL, namespace, err)
		}
		return ""
	}
	return tok
}

func readProject(path string) (ProjectEntry, error) {
	var e ProjectEntry
	f, err := os.Open(path)
	if err != nil {
		return e, err
	}
	defer f.Close()
	b := make([]byte, maxEntry+1)
	n, _ := f.Read(b)
	if n > maxEntry {
		return e, fmt.Errorf("larger than %d bytes", maxEntry)
	}
	if err := json.Unmarshal(b[:n], &e); err != nil {
		return e, err
	}
	return e, nil
}
