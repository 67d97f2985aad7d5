// Package lock reads, checks and writes worker-compose.lock, the file beside a compose file
// that pins every package:// container to an exact version and its artifacts (req F1, F3), and
// produces the --frozen errors COMPOSE_LOCK_REQUIRED and
// COMPOSE_LOCK_OUT_OF_DATE.
package lock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/state"
	"gopkg.in/yaml.v3"
)

// FormatVersion is the only lock format version.
const FormatVersion = 1

// Lock is a parsed worker-compose.lock.
type Lock struct {
	Version int `yaml:"version"`
	// Containers are the package:// containers, by container key.
	Containers map[string]*Entry `yaml:"containers"`
	// Graphs records, for an add root, the containers it declared (provenance).
	Graphs map[string][]string `yaml:"graphs,omitempty"`
}

// Entry pins one container.
type Entry struct {
	// Worker is the container's worker: value; Requested its version selector as written.
	Worker    string   `yaml:"worker"`
	Requested string   `yaml:"requested"`
	Resolved  Resolved `yaml:"resolved"`
}

// Mapped says whether Requested, a pin of iii's versions, was mapped onto Resolved.Version by
// the registry's compatibility table.
func (e *Entry) Mapped() bool { return e.Resolved.IIILine != "" }

// Resolved is what the registry answered for the selector.
type Resolved struct {
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
	// Type is binary or bundle.
	Type string `yaml:"type"`
	// Artifacts by target triple (or "bundle").
	Artifacts     map[string]Artifact `yaml:"artifacts"`
	DefaultConfig map[string]any      `yaml:"default_config,omitempty"`
	// IIILine is set when no published version satisfied Requested and the registry's
	// compatibility table mapped it onto Version: the iii version line (MAJOR.MINOR) that holds
	// the pin. Empty when a published version satisfied Requested itself.
	IIILine      string            `yaml:"iii_line,omitempty"`
	Dependencies map[string]string `yaml:"dependencies,omitempty"`
}

// Artifact is one archive and its digest.
type Artifact struct {
	URL    string `yaml:"url"`
	SHA256 string `yaml:"sha256"`
}

// New returns an empty lock.
func New() *Lock { return &Lock{Version: FormatVersion, Containers: map[string]*Entry{}} }

// PathFor returns the lock path of a compose file: .yaml or .yml becomes .lock.
func PathFor(composePath string) string {
	for _, ext := range []string{".yaml", ".yml"} {
		if strings.HasSuffix(composePath, ext) {
			return strings.TrimSuffix(composePath, ext) + ".lock"
		}
	}
	return composePath + ".lock"
}

// Read reads and validates the lock at path. A missing file returns an error matching
// fs.ErrNotExist; anything else wrong is INVALID_COMPOSE_LOCK.
func Read(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse validates data as the lock at path.
func Parse(path string, data []byte) (*Lock, error) {
	var l Lock
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&l); err != nil && !errors.Is(err, io.EOF) {
		return nil, &errcode.Error{Code: errcode.InvalidComposeLock, Message: fmt.Sprintf("%s is not a valid lock: %s; delete it and run `iii compose build` to write a new one", path, strings.TrimPrefix(err.Error(), "yaml: ")), Err: err}
	}
	if err := l.Validate(path); err != nil {
		return nil, err
	}
	return &l, nil
}

var (
	hex64   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	iiiLine = regexp.MustCompile(`^[0-9]{1,9}\.[0-9]{1,9}$`)
)

// Validate checks the rules of the format: version 1, package:// workers, the resolved name
// matching the reference, type binary or bundle, and a URL and a 64-hex SHA-256 per artifact.
func (l *Lock) Validate(path string) error {
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.InvalidComposeLock, "%s is not a valid lock: %s; delete it and run `iii compose build` to write a new one", path, fmt.Sprintf(format, args...))
	}
	if l.Version != FormatVersion {
		return bad("version is %d, only %d is supported", l.Version, FormatVersion)
	}
	if l.Containers == nil {
		l.Containers = map[string]*Entry{}
	}
	for _, key := range slices.Sorted(maps.Keys(l.Containers)) {
		e := l.Containers[key]
		if e == nil {
			return bad("container '%s' has no entry", key)
		}
		ref, ok := strings.CutPrefix(e.Worker, "package://")
		if !ok {
			return bad("container '%s': worker %q is not package://", key, e.Worker)
		}
		if last := ref[strings.LastIndexByte(ref, '/')+1:]; e.Resolved.Name != last {
			return bad("container '%s': resolved.name %q does not match %s", key, e.Resolved.Name, e.Worker)
		}
		if e.Resolved.Version == "" {
			return bad("container '%s': resolved.version is missing", key)
		}
		if e.Resolved.Type != "binary" && e.Resolved.Type != "bundle" {
			return bad("container '%s': resolved.type %q is neither binary nor bundle", key, e.Resolved.Type)
		}
		if l := e.Resolved.IIILine; l != "" && !iiiLine.MatchString(l) {
			return bad("container '%s': resolved.iii_line %q is not an iii version line (MAJOR.MINOR)", key, l)
		}
		if len(e.Resolved.Artifacts) == 0 {
			return bad("container '%s': resolved.artifacts is empty", key)
		}
		for t, a := range e.Resolved.Artifacts {
			if a.URL == "" || !hex64.MatchString(a.SHA256) {
				return bad("container '%s': artifact %s needs a url and a 64-hex sha256", key, t)
			}
		}
	}
	return nil
}

// Marshal renders the lock (keys sorted, so equal locks are equal bytes).
func (l *Lock) Marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# worker-compose.lock: written by iii compose; commit it with worker-compose.yaml.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Write writes l to path atomically with mode 0644, only when its bytes differ from the file's.
// changed reports whether the file was written.
func Write(path string, l *Lock) (changed bool, err error) {
	data, err := l.Marshal()
	if err != nil {
		return false, errcode.New(errcode.IOError, "cannot render %s: %w", path, err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := state.WriteFileAtomic(path, data, 0o644); err != nil {
		return false, errcode.New(errcode.IOError, "cannot write %s: %w", path, err)
	}
	return true, nil
}

// Want is what the compose file asks of one package:// container.
type Want struct {
	Key, Worker, Requested string
}

// Required is COMPOSE_LOCK_REQUIRED for a missing lock at path.
func Required(path string) error {
	return errcode.New(errcode.ComposeLockRequired, "%s does not exist. Run `iii compose build` or `compose::up` once to create it (or `iii compose --up` without --frozen), then commit it", path)
}

// Check compares the lock with the file's package containers and returns
// COMPOSE_LOCK_OUT_OF_DATE naming the first difference.
func (l *Lock) Check(path string, wants []Want) error {
	out := func(format string, args ...any) error {
		return errcode.New(errcode.ComposeLockOutOfDate, "%s does not match its compose file: %s. Run `iii compose build` (or `iii compose --up` without --frozen) and commit the lock", path, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for _, w := range wants {
		seen[w.Key] = true
		e, ok := l.Containers[w.Key]
		if !ok {
			return out("container '%s' is missing from the lock", w.Key)
		}
		if e.Worker != w.Worker || e.Requested != w.Requested {
			return out("container '%s' changed from %s@%s to %s@%s", w.Key, e.Worker, e.Requested, w.Worker, w.Requested)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(l.Containers)) {
		if !seen[k] {
			return out("container '%s' exists only in the lock", k)
		}
	}
	return nil
}
