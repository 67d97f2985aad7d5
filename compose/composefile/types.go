// Package composefile reads worker-compose.yaml: iii's strict compose-file schema
// with line-numbered errors, durations, ${VAR} interpolation, worker sources, the engine and
// sandbox sections, start_after graph checks, and the 0.26 migration error for the old
// engine.workers.iii-sandbox block. Every rejection is an *errcode.Error naming the file.
package composefile

import (
	"time"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"gopkg.in/yaml.v3"
)

// Defaults of the schema.
const (
	DefaultNamespace      = "default"
	DefaultEngineURL      = "ws://127.0.0.1:49134"
	DefaultStartupTimeout = 60 * time.Second
	DefaultStopTimeout    = 10 * time.Second
	DefaultPreRunTimeout  = 60 * time.Second
	// DefaultSandboxAdapter is engine.sandbox.adapter when unset: the adapter's function prefix.
	DefaultSandboxAdapter = scode.AdapterName
	// ManifestName is the manifest a path:// worker keeps in its directory.
	ManifestName = "iii.worker.yaml"
)

// File is a parsed and validated compose file.
type File struct {
	// Path is the file's absolute path; Dir its directory (path:// workers resolve against it).
	Path, Dir string
	// Namespace is the file's namespace: key, or DefaultNamespace; NamespaceSet says it was written.
	Namespace    string
	NamespaceSet bool
	// StartupTimeout and StopTimeout are the project-wide budgets.
	StartupTimeout, StopTimeout time.Duration
	// Engine is nil when engine: is absent or null: Compose starts no engine and attaches to the
	// one at its address (req B4, E7).
	Engine *Engine
	// Containers by key; Order lists the keys as written.
	Containers map[string]*Container
	Order      []string
	// Doc is the parsed YAML document, for edits that keep comments.
	Doc *yaml.Node
}

// Engine is a mapping under engine: (Compose starts and owns the engine).
type Engine struct {
	// URL is engine.url after interpolation, DefaultEngineURL when unset.
	URL string
	// RegistrationNamespaceGraceMS is passed through to the engine; nil when unset.
	RegistrationNamespaceGraceMS *int64
	// Workers are the engine-owned workers (opaque config values); WorkerOrder as written.
	Workers     map[string]any
	WorkerOrder []string
	// Sandbox is engine.sandbox, nil when the section is left out.
	Sandbox *Sandbox
	Line    int
}

// Sandbox binds the engine's sandbox router to an adapter; the section may be left out (req B11).
type Sandbox struct {
	// Adapter is the adapter's function prefix (DefaultSandboxAdapter when unset, req B11).
	Adapter string
	// Namespace is where the adapter runs; empty means the project's namespace.
	Namespace string
	Line      int
}

// NamespaceFor returns the namespace the adapter runs in for a project in project: the
// project's own unless engine.sandbox.namespace names another (req B12).
func (s *Sandbox) NamespaceFor(project string) string {
	if s.Namespace != "" {
		return s.Namespace
	}
	return project
}

// SourceKind tells package:// from path:// workers.
type SourceKind int

// Worker source kinds.
const (
	PackageSource SourceKind = iota + 1
	PathSource
)

// Source is a parsed worker: value.
type Source struct {
	Kind SourceKind
	// Raw is the value as written (after interpolation).
	Raw string
	// Host is the registry host of package://host/name, empty for the default registry.
	Host string
	// Name is the package name (package://) .
	Name string
	// Dir is the absolute worker directory (path://).
	Dir string
}

// Scripts are a container's hooks and start command.
type Scripts struct {
	PreRun        string
	PreRunTimeout time.Duration
	Run           string
	PostRun       string
}

// Container is one entry under containers:.
type Container struct {
	Key    string
	Line   int
	Source Source
	// Version is the selector as written: an exact version, a range or a tag (package:// only).
	Version    string
	StartAfter []string
	ConfigName string
	// ConfigOverride is merged over the fetched configuration; never interpolated. Nil when unset.
	ConfigOverride map[string]any
	WorkingDir     string
	// Environment after interpolation; EnvOrder lists its keys as written.
	Environment map[string]string
	EnvOrder    []string
	EnvFile     []string
	// StartupTimeout overrides the project's budget when non-zero.
	StartupTimeout time.Duration
	Scripts        Scripts
	// Restart is the restart policy: RestartNo (default), RestartOnFailure or RestartAlways.
	Restart string
	// Required is false when the project starts without this container if it fails to start.
	Required bool
}

// IsPackage reports whether the container is a registry package.
func (c *Container) IsPackage() bool { return c.Source.Kind == PackageSource }
