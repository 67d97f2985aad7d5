package composefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/compose/errcode"
)

// Load reads and parses the compose file at path. lookup resolves ${VAR} (the CLI passes
// os.LookupEnv); nil is an environment where no variable is set.
func Load(path string, lookup Lookup) (*File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", path, err)
	}
	fh, err := os.Open(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errcode.New(errcode.NoComposeFile, "%s does not exist; write a worker-compose.yaml or name one with -f", abs)
		}
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", abs, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, errcode.New(errcode.IOError, "cannot read %s: %w", abs, err)
	}
	return Parse(abs, data, lookup)
}

// MaxFileSize is the largest compose file Compose reads: 8 MiB, hundreds of times a real
// project's file, so a runaway or hostile file is refused before it costs memory.
const MaxFileSize = 8 << 20

func tooLarge(path string) error {
	return errcode.New(errcode.ComposeFileTooLarge, "%s is larger than %d MiB, the most Compose reads; a compose file is a short list of containers and settings", path, MaxFileSize>>20)
}

// Parse validates data as the compose file at path (made absolute), resolving ${VAR} with
// lookup as Load does. It never panics: every rejection is an *errcode.Error whose message names
// the file.
func Parse(path string, data []byte, lookup Lookup) (f *File, err error) {
	if abs, aerr := filepath.Abs(path); aerr == nil {
		path = abs
	}
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	p := &parser{path: path, lookup: lookup}
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, errcode.New(errcode.InvalidComposeFile, "%s is not valid compose YAML: %v", path, r)
		}
	}()
	return p.parse(data)
}

type parser struct {
	path   string
	lookup Lookup
}

type nodeRef struct {
	node  *yaml.Node
	where string
}

type pair struct {
	key   string
	knode *yaml.Node
	val   *yaml.Node
	where string
}

func (p *parser) invalid(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return errcode.New(errcode.InvalidComposeFile, "%s is not valid compose YAML: line %d: %s", p.path, line, fmt.Sprintf(format, args...))
}

func (p *parser) at(code string, n *yaml.Node, where, format string, args ...any) error {
	return errcode.New(code, "%s:%d: %s: %s", p.path, n.Line, where, fmt.Sprintf(format, args...))
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// pairs returns the key/value pairs of a mapping, refusing aliases, non-string and duplicate
// keys, and (when allowed is non-nil) keys outside allowed.
func (p *parser) pairs(n *yaml.Node, where string, allowed []string) ([]pair, error) {
	if n.Kind == yaml.AliasNode {
		return nil, p.invalid(n, "%s: anchors and aliases are not supported here", where)
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.invalid(n, "%s must be a mapping", where)
	}
	seen := map[string]int{}
	var out []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			return nil, p.invalid(k, "%s: keys must be plain strings", where)
		}
		if first, dup := seen[k.Value]; dup {
			return nil, p.invalid(k, "duplicate key %q in %s (first on line %d)", k.Value, whereOrTop(where), first)
		}
		seen[k.Value] = k.Line
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			return nil, p.invalid(k, "unknown key %q in %s (allowed: %s)", k.Value, whereOrTop(where), strings.Join(allowed, ", "))
		}
		if v.Kind == yaml.AliasNode {
			return nil, p.invalid(v, "%s: anchors and aliases are not supported here", join(where, k.Value))
		}
		out = append(out, pair{key: k.Value, knode: k, val: v, where: join(where, k.Value)})
	}
	return out, nil
}

func whereOrTop(where string) string {
	if where == "" {
		return "the top level"
	}
	return where
}

// scalar returns the text of a non-null scalar value.
func (p *parser) scalar(pr pair) (string, error) {
	if pr.val.Kind != yaml.ScalarNode || isNull(pr.val) {
		return "", p.invalid(pr.val, "%s must be a string", pr.where)
	}
	return pr.val.Value, nil
}

// expanded returns a scalar after ${VAR} interpolation.
func (p *parser) expanded(pr pair) (string, error) {
	s, err := p.scalar(pr)
	if err != nil {
		return "", err
	}
	return p.expandAt(nodeRef{pr.val, pr.where}, s)
}

// engineURLPattern is what engine.url may be once interpolated: ws:// or wss://, a host name or
// a bracketed IPv6 address, an optional port, path, query and fragment with valid escapes. The
// JSON Schema states the same pattern (TestEngineURLPatternIsTheSchemas).
const engineURLPattern = `^\s*[wW][sS][sS]?://([A-Za-z0-9._~!$&'()*+,;=:-]*@)?([A-Za-z0-9._~!$&'()*+,;=-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]*)?([/?#]([^\x00-\x20\x7f%]|%[0-9A-Fa-f]{2})*)?\s*$`

var engineURLRE = regexp.MustCompile(engineURLPattern)

var durationRE = regexp.MustCompile(`^([0-9]{1,9})(ms|s|m|h)$`)

// ParseDuration reads a compose duration: a whole number with the unit ms, s, m or h.
func ParseDuration(s string) (time.Duration, bool) {
	m := durationRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, false
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	return time.Duration(n) * unit, true
}

func (p *parser) duration(pr pair) (time.Duration, error) {
	s, err := p.scalar(pr)
	if err != nil {
		return 0, p.at(errcode.InvalidDuration, pr.val, pr.where, "must be a duration such as 500ms, 30s or 2m")
	}
	d, ok := ParseDuration(s)
	if !ok || d <= 0 {
		return 0, p.at(errcode.InvalidDuration, pr.val, pr.where, "%q is not a duration; write a positive whole number with a unit, such as 500ms, 30s or 2m", s)
	}
	return d, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)

// ValidNamespace reports whether ns is a namespace: [a-z0-9_-], not empty.
func ValidNamespace(ns string) bool { return nameRE.MatchString(ns) }

// parse validates the document. A file without an engine: mapping attaches to a running engine
// and must declare at least one container (req E6).
func (p *parser) parse(data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errcode.New(errcode.EmptyContainers, "%s is empty: declare at least one container, or an engine: mapping", p.path)
		}
		return nil, &errcode.Error{Code: errcode.InvalidComposeFile, Message: fmt.Sprintf("%s is not valid compose YAML: %s", p.path, strings.TrimPrefix(err.Error(), "yaml: ")), Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errcode.New(errcode.InvalidComposeFile, "%s is not valid compose YAML: it must hold exactly one YAML document", p.path)
	}
	f := &File{Path: p.path, Dir: filepath.Dir(p.path), Namespace: DefaultNamespace,
		StartupTimeout: DefaultStartupTimeout, StopTimeout: DefaultStopTimeout,
		Containers: map[string]*Container{}, Doc: &doc}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, errcode.New(errcode.EmptyContainers, "%s is empty: declare at least one container, or an engine: mapping", p.path)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.invalid(root, "the top level must be a mapping of namespace, startup_timeout, stop_timeout, engine and containers")
	}
	if err := p.checkSandboxMoved(root); err != nil {
		return nil, err
	}
	top, err := p.pairs(root, "", []string{"namespace", "startup_timeout", "stop_timeout", "engine", "containers"})
	if err != nil {
		return nil, err
	}
	var containers *pair
	for i, pr := range top {
		switch pr.key {
		case "namespace":
			ns, err := p.expanded(pr)
			if err != nil {
				return nil, err
			}
			if !ValidNamespace(ns) {
				return nil, p.at(errcode.InvalidNamespace, pr.val, pr.where, "%q is not a namespace: use lowercase letters, digits, _ and -", ns)
			}
			f.Namespace, f.NamespaceSet = ns, true
		case "startup_timeout":
			if f.StartupTimeout, err = p.duration(pr); err != nil {
				return nil, err
			}
		case "stop_timeout":
			if f.StopTimeout, err = p.duration(pr); err != nil {
				return nil, err
			}
		case "engine":
			if f.Engine, err = p.engine(pr); err != nil {
				return nil, err
			}
		case "containers":
			containers = &top[i]
		}
	}
	if containers != nil && !isNull(containers.val) {
		if err := p.containers(f, *containers); err != nil {
			return nil, err
		}
	}
	if len(f.Containers) == 0 && f.Engine == nil {
		return nil, errcode.New(errcode.EmptyContainers, "%s declares no containers and no engine: mapping, so there is nothing to run: declare at least one container (a file without an engine: section attaches to a running engine)", p.path)
	}
	if err := p.checkGraph(f); err != nil {
		return nil, err
	}
	return f, nil
}

var (
	engineWorkers   = []string{"configuration", "iii-worker-manager", "iii-http-functions", "iii-stream"}
	injectedWorkers = []string{"iii-engine-functions", "iii-telemetry", "iii-observability"}
)

func (p *parser) engine(pr pair) (*Engine, error) {
	if isNull(pr.val) {
		return nil, nil
	}
	e := &Engine{URL: DefaultEngineURL, Line: pr.val.Line}
	kids, err := p.pairs(pr.val, "engine", []string{"url", "registration_namespace_grace_ms", "workers", "sandbox"})
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		switch k.key {
		case "url":
			s, err := p.expanded(k)
			if err != nil {
				return nil, err
			}
			if !engineURLRE.MatchString(s) {
				return nil, p.at(errcode.InvalidManagedEngineURL, k.val, k.where, "%q is not an engine URL; write ws://HOST:PORT (default %s)", s, DefaultEngineURL)
			}
			e.URL = strings.TrimSpace(s)
		case "registration_namespace_grace_ms":
			n, err := strconv.ParseInt(k.val.Value, 10, 64)
			if k.val.Kind != yaml.ScalarNode || err != nil || n < 0 {
				return nil, p.invalid(k.val, "%s must be a whole number of milliseconds", k.where)
			}
			e.RegistrationNamespaceGraceMS = &n
		case "workers":
			if err := p.engineWorkers(e, k); err != nil {
				return nil, err
			}
		case "sandbox":
			if e.Sandbox, err = p.sandbox(k); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

// engineWorkers reads engine.workers: a null value is INVALID_COMPOSE_FILE, {} keeps the
// engine's default workers (req B3).
func (p *parser) engineWorkers(e *Engine, k pair) error {
	if isNull(k.val) {
		return p.invalid(k.val, "engine.workers is empty; write workers: {} to keep the engine's default workers")
	}
	ws, err := p.pairs(k.val, "engine.workers", nil)
	if err != nil {
		return err
	}
	e.Workers = map[string]any{}
	for _, w := range ws {
		base, _, _ := strings.Cut(w.key, "#")
		switch {
		case slices.Contains(injectedWorkers, base):
			return p.at(errcode.EngineWorkerIsInjected, w.knode, w.where, "the engine injects %s itself; remove it from engine.workers", base)
		case !slices.Contains(engineWorkers, base):
			return p.at(errcode.UnsupportedEngineWorker, w.knode, w.where, "%q is not an engine-owned worker (engine.workers takes %s, optionally with a #instance suffix); declare project workers under containers", w.key, strings.Join(engineWorkers, ", "))
		case w.val.Kind != yaml.MappingNode:
			return p.at(errcode.InvalidEngineWorkerConfig, w.val, w.where, "must be a mapping of the worker's settings ({} keeps its defaults)")
		}
		if base == "iii-stream" {
			if err := p.streamAdapter(w); err != nil {
				return err
			}
		}
		v, err := p.value(w.val, w.where)
		if err != nil {
			return err
		}
		e.Workers[w.key] = v
		e.WorkerOrder = append(e.WorkerOrder, w.key)
	}
	return nil
}

// streamAdapter refuses iii-stream's adapters the engine does not have (iii's redis and
// bridge: the engine keeps streams in JetStream) before anything is resolved or started, naming
// the file, the line and the key; the engine refuses them as well, but in the configuration it
// is given, which is not the user's file.
func (p *parser) streamAdapter(w pair) error {
	for i := 0; i+1 < len(w.val.Content); i += 2 {
		if w.val.Content[i].Value != "adapter" || w.val.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		a := w.val.Content[i+1]
		for j := 0; j+1 < len(a.Content); j += 2 {
			if n := a.Content[j+1]; a.Content[j].Value == "name" && (n.Value == "redis" || n.Value == "bridge") {
				return p.at(errcode.ConfigUnsupported, n, join(w.where, "adapter.name"), "%q is iii's and not supported: this engine keeps streams in JetStream "+
					"(adapter kv, the default); to share streams between engines run the stream worker with nats.url", n.Value)
			}
		}
	}
	return nil
}

func (p *parser) sandbox(k pair) (*Sandbox, error) {
	if isNull(k.val) {
		return nil, p.invalid(k.val, "engine.sandbox is empty; write sandbox: {} for the defaults (adapter %s in the project's namespace) or leave the section out", DefaultSandboxAdapter)
	}
	s := &Sandbox{Adapter: DefaultSandboxAdapter, Line: k.val.Line}
	kids, err := p.pairs(k.val, "engine.sandbox", []string{"adapter", "namespace"})
	if err != nil {
		return nil, err
	}
	for _, c := range kids {
		v, err := p.expanded(c)
		if err != nil {
			return nil, err
		}
		if !ValidNamespace(v) {
			code := errcode.InvalidComposeFile
			if c.key == "namespace" {
				code = errcode.InvalidNamespace
			}
			return nil, p.at(code, c.val, c.where, "%q is not valid: use lowercase letters, digits, _ and -", v)
		}
		if c.key == "adapter" {
			s.Adapter = v
		} else {
			s.Namespace = v
		}
	}
	return s, nil
}

var containerKeys = []string{"worker", "version", "start_after", "depends_on", "config_name", "config_override",
	"working_dir", "environment", "env_file", "startup_timeout", "scripts", "restart", "required"}

var containerKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// Reserved lists the III_* variables Compose sets for every worker; environment may not set them.
var Reserved = []string{"III_URL", "III_NAMESPACE", "III_COMPOSE_NAMESPACE", "III_COMPOSE_FILE", "III_COMPOSE_DIR",
	"III_WORKER_NAME", "III_CONFIG", "III_CONFIG_NAME", "III_TOKEN_FILE", "III_COMPOSE_PROCESS"}

func (p *parser) containers(f *File, pr pair) error {
	list, err := p.pairs(pr.val, "containers", nil)
	if err != nil {
		return err
	}
	for _, c := range list {
		if !containerKeyRE.MatchString(c.key) {
			return p.invalid(c.knode, "container key %q must start with a letter or digit and hold only letters, digits, ., _ and -", c.key)
		}
		ct, err := p.container(f, c)
		if err != nil {
			return err
		}
		f.Containers[c.key] = ct
		f.Order = append(f.Order, c.key)
	}
	return nil
}

func (p *parser) container(f *File, c pair) (*Container, error) {
	ct := &Container{Key: c.key, Line: c.knode.Line, Restart: RestartNo, Required: true}
	kids, err := p.pairs(c.val, c.where, containerKeys)
	if err != nil {
		return nil, err
	}
	var n containerNodes
	for _, k := range kids {
		if err := p.containerKey(f, ct, c, k, &n); err != nil {
			return nil, err
		}
	}
	if err := p.checkContainer(ct, c, &n); err != nil {
		return nil, err
	}
	return ct, nil
}

// containerNodes remembers the keys of one container that the checks after the key loop need.
type containerNodes struct {
	worker, version, run, preRunTimeout *yaml.Node
	hasAfter                            bool
}

// containerKey reads key k of container c into ct, noting in n what checkContainer needs.
func (p *parser) containerKey(f *File, ct *Container, c pair, k pair, n *containerNodes) error {
	var err error
	switch k.key {
	case "worker":
		s, err := p.expanded(k)
		if err != nil {
			return err
		}
		src, err := p.source(f, k, s)
		if err != nil {
			return err
		}
		ct.Source, n.worker = src, k.val
	case "version":
		if ct.Version, err = p.expanded(k); err != nil {
			return err
		}
		if strings.TrimSpace(ct.Version) == "" {
			return p.invalid(k.val, "%s is blank", k.where)
		}
		n.version = k.val
	case "start_after", "depends_on":
		if n.hasAfter {
			return p.invalid(k.knode, "%s: start_after and its older name depends_on are both set; keep start_after", c.where)
		}
		n.hasAfter = true
		if ct.StartAfter, err = p.stringList(k, false); err != nil {
			return err
		}
	case "config_name":
		if ct.ConfigName, err = p.expanded(k); err != nil {
			return err
		}
		if !configNameRE.MatchString(ct.ConfigName) {
			return p.at(errcode.InvalidConfigName, k.val, k.where, "%q is not a configuration id: 1 to 64 of a-z, 0-9, _ and -", ct.ConfigName)
		}
	case "config_override":
		if k.val.Kind != yaml.MappingNode {
			return p.invalid(k.val, "%s must be a mapping", k.where)
		}
		v, err := p.value(k.val, k.where)
		if err != nil {
			return err
		}
		ct.ConfigOverride = v.(map[string]any)
	case "working_dir":
		if ct.WorkingDir, err = p.expanded(k); err != nil {
			return err
		}
	case "environment":
		if err := p.environment(ct, k); err != nil {
			return err
		}
	case "env_file":
		if ct.EnvFile, err = p.stringList(k, true); err != nil {
			return err
		}
	case "startup_timeout":
		if ct.StartupTimeout, err = p.duration(k); err != nil {
			return err
		}
	case "scripts":
		if n.run, n.preRunTimeout, err = p.scripts(ct, k); err != nil {
			return err
		}
	case "restart", "required":
		if err := p.policy(ct, k); err != nil {
			return err
		}
	}
	return nil
}

// checkContainer applies the rules that span several keys of container c.
func (p *parser) checkContainer(ct *Container, c pair, n *containerNodes) error {
	if n.worker == nil {
		return p.invalid(c.knode, "%s: missing required key \"worker\" (package://NAME or path://DIR)", c.where)
	}
	if ct.IsPackage() {
		if ct.Version == "" {
			return p.at(errcode.MissingVersionForPackage, c.knode, c.where, "%s needs a version: an exact version, a range such as '^0.3', or a tag such as latest", ct.Source.Raw)
		}
		if n.run != nil {
			return p.at(errcode.RunNotAllowedForPackage, n.run, c.where+".scripts.run", "a package:// worker starts its own binary; scripts.run is only for path:// workers")
		}
	} else if n.version != nil {
		return p.invalid(n.version, "%s.version applies only to package:// workers", c.where)
	}
	if n.preRunTimeout != nil && ct.Scripts.PreRun == "" {
		return p.at(errcode.PreRunTimeoutWithoutPreRun, n.preRunTimeout, c.where+".scripts.pre_run_timeout", "set scripts.pre_run, or remove pre_run_timeout")
	}
	return nil
}

var packageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// configNameRE is what a container's config_name may be.
var configNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

func (p *parser) source(f *File, k pair, s string) (Source, error) {
	src := Source{Raw: s}
	switch {
	case strings.HasPrefix(s, "package://"):
		ref := strings.TrimPrefix(s, "package://")
		host, name := "", ref
		if i := strings.LastIndexByte(ref, '/'); i >= 0 {
			host, name = ref[:i], ref[i+1:]
		}
		if !packageNameRE.MatchString(name) || strings.Contains(host, "/") || (host == "" && strings.Contains(ref, "/")) {
			return src, p.at(errcode.UnsupportedWorkerSource, k.val, k.where, "%q is not a package reference; write package://NAME or package://REGISTRY-HOST/NAME", s)
		}
		src.Kind, src.Host, src.Name = PackageSource, host, name
	case strings.HasPrefix(s, "path://"):
		dir := strings.TrimPrefix(s, "path://")
		if dir == "" {
			return src, p.at(errcode.UnsupportedWorkerSource, k.val, k.where, "%q names no directory; write path://./DIR (relative to %s)", s, f.Dir)
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(f.Dir, dir)
		}
		src.Kind, src.Dir = PathSource, filepath.Clean(dir)
	default:
		return src, p.at(errcode.UnsupportedWorkerSource, k.val, k.where, "%q is neither package://NAME nor path://DIR", s)
	}
	return src, nil
}

func (p *parser) stringList(k pair, expand bool) ([]string, error) {
	if k.val.Kind != yaml.SequenceNode {
		return nil, p.invalid(k.val, "%s must be a list", k.where)
	}
	var out []string
	for i, item := range k.val.Content {
		if item.Kind != yaml.ScalarNode || isNull(item) {
			return nil, p.invalid(item, "%s[%d] must be a string", k.where, i)
		}
		v := item.Value
		if expand {
			var err error
			if v, err = p.expandAt(nodeRef{item, fmt.Sprintf("%s[%d]", k.where, i)}, v); err != nil {
				return nil, err
			}
		}
		if slices.Contains(out, v) {
			return nil, p.invalid(item, "%s lists %q twice", k.where, v)
		}
		out = append(out, v)
	}
	return out, nil
}

func (p *parser) environment(ct *Container, k pair) error {
	vars, err := p.pairs(k.val, k.where, nil)
	if err != nil {
		return err
	}
	ct.Environment = map[string]string{}
	for _, v := range vars {
		if slices.Contains(Reserved, v.key) {
			return p.at(errcode.ReservedEnvOverride, v.knode, v.where, "Compose sets %s for every worker; remove it from environment", v.key)
		}
		if v.val.Kind != yaml.ScalarNode {
			return p.invalid(v.val, "%s must be a string", v.where)
		}
		val := v.val.Value
		if isNull(v.val) {
			val = ""
		}
		if val, err = p.expandAt(nodeRef{v.val, v.where}, val); err != nil {
			return err
		}
		ct.Environment[v.key] = val
		ct.EnvOrder = append(ct.EnvOrder, v.key)
	}
	return nil
}

func (p *parser) scripts(ct *Container, k pair) (run, preRunTimeout *yaml.Node, err error) {
	kids, err := p.pairs(k.val, k.where, []string{"pre_run", "pre_run_timeout", "run", "post_run", "pre_start", "pre_start_timeout"})
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, s := range kids {
		name := map[string]string{"pre_start": "pre_run", "pre_start_timeout": "pre_run_timeout"}[s.key]
		if name == "" {
			name = s.key
		}
		if seen[name] {
			return nil, nil, p.invalid(s.knode, "%s: %s and its older name are both set", k.where, name)
		}
		seen[name] = true
		if name == "pre_run_timeout" {
			if ct.Scripts.PreRunTimeout, err = p.duration(s); err != nil {
				return nil, nil, err
			}
			preRunTimeout = s.val
			continue
		}
		v, err := p.expanded(s)
		if err != nil {
			return nil, nil, err
		}
		switch name {
		case "pre_run":
			ct.Scripts.PreRun = v
		case "run":
			ct.Scripts.Run, run = v, s.val
		case "post_run":
			ct.Scripts.PostRun = v
		}
	}
	if ct.Scripts.PreRun != "" && ct.Scripts.PreRunTimeout == 0 {
		ct.Scripts.PreRunTimeout = DefaultPreRunTimeout
	}
	return run, preRunTimeout, nil
}
