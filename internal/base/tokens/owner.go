// The owner credential is what an engine the user runs writes for a Compose of the
// same user, so Compose may publish to that engine without a grant in its config.yaml. An engine
// started with `iii --config` whose config.yaml has no namespaces: list writes, once it listens, a
// fresh random token to ~/.iii/engine/owners/<host>_<port> (file mode 0600, directory 0700, written
// atomically, see privfile) and grants the connection presenting it the owner-only functions
// (configuration::publish, engine::sandbox::bind); it removes the file when it stops cleanly, and
// the next engine on that address replaces one a killed engine left. A Compose that attaches to
// that address reads the file and presents it as its owner token, so the guide's flow (a sandbox:
// section, an adapter-only compose file, `iii compose --up --engine URL`) needs no grant.
//
// Who cannot get it: another user (the modes), a VM (the file is under ~/.iii/engine, never the
// compose directory or the package cache the adapter mounts), a web page (no HTTP path serves a
// file) and the project's workers (they get the project token). An engine that protects
// namespaces writes no credential, so there the grant in config.yaml stays the only way.

package tokens

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/iii-go/iii/internal/base/iiidir"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/iii-go/iii/internal/base/privfile"
)

// OwnerDir is where the credentials live, relative to the home directory.
const OwnerDir = ".iii/" + iiidir.OwnersDir

// ErrNoOwner means no engine of this user recorded a credential for the address.
var ErrNoOwner = errors.New("no owner credential recorded for this engine address")

// maxToken bounds the size of a credential file LookupOwner accepts.
const maxToken = 256

// OwnerDirPath returns ~/.iii/engine/owners (HOME honoured).
func OwnerDirPath() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, filepath.FromSlash(OwnerDir)), nil
}

// OwnerPath returns the credential path for an engine listening on addr (host:port).
func OwnerPath(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	dir, err := OwnerDirPath()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, addrKey(host, port)), nil
}

// WriteOwner puts a fresh credential for the engine listening on addr in place, replacing whatever
// an earlier engine left there, and returns its path. remove deletes it unless another engine
// has replaced it since.
func WriteOwner(addr string) (path string, remove func() error, err error) {
	path, err = OwnerPath(addr)
	if err != nil {
		return "", nil, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	tok := hex.EncodeToString(b[:])
	if err := privfile.Write(path, []byte(tok+"\n")); err != nil {
		return "", nil, err
	}
	remove = func() error {
		cur, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(cur)) != tok {
			return nil // gone, or another engine's now
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return path, remove, nil
}

// ClearOwner removes a credential a dead engine left for addr: the caller listens there now and
// writes none (it protects namespaces).
func ClearOwner(addr string) error {
	path, err := OwnerPath(addr)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// LookupOwner returns the path of the credential the engine at engineURL wrote for this user.
// ErrNoOwner when there is none; any other error says why the file is not trusted (never the
// token): its directory and it must be the user's own, no symlinks, closed to group and others,
// and it must hold a token.
func LookupOwner(engineURL string) (string, error) {
	key, err := urlKey(engineURL)
	if err != nil {
		return "", err
	}
	dir, err := OwnerDirPath()
	if err != nil {
		return "", ErrNoOwner
	}
	path := filepath.Join(dir, key)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "", ErrNoOwner
	}
	if err := privfile.Check(dir, true); err != nil {
		return "", err
	}
	if err := privfile.Check(path, false); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) > maxToken || strings.TrimSpace(string(b)) == "" {
		return "", fmt.Errorf("%s does not hold a token", path)
	}
	return path, nil
}
