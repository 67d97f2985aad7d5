// Package engineconf renders the config.yaml of the engine that `iii compose --up` starts for a
// file whose engine: is a mapping. The engine listens where engine.url says, runs the declared
// engine workers, protects the project namespace with the project token (by file path: the
// token is never written into the config), and binds its sandbox router to engine.sandbox, so
// only an engine Compose owns is ever bound by Compose (req E1).
package engineconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strconv"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"gopkg.in/yaml.v3"
)

// DefaultAdapter is the sandbox router's adapter prefix when engine.sandbox names none.
const DefaultAdapter = scode.AdapterName

// DefaultNamespace is the namespace the engine never token-protects (every caller uses it).
const DefaultNamespace = "default"

// OwnerNamespace carries the tokens of a project that runs in the default namespace: the engine
// cannot protect default, so they are listed under this otherwise unused namespace, where the
// owner token still grants the Compose that presents it the owner-only engine functions, and the
// project token is what the engine accepts for the project: calls to Compose's protected
// compose::* and registrations of the bound sandbox adapter's functions in default.
const OwnerNamespace = "iii-compose-owner"

// Input is what the engine config is built from.
type Input struct {
	// URL is engine.url (ws://host:port).
	URL string
	// GraceMS is engine.registration_namespace_grace_ms, nil when unset.
	GraceMS *int64
	// Workers are engine.workers (name -> config mapping), in WorkerOrder.
	Workers     map[string]any
	WorkerOrder []string
	// SandboxAdapter and SandboxNamespace bind the router (engine.sandbox, defaults applied by
	// the caller: the adapter prefix and the project namespace).
	SandboxAdapter, SandboxNamespace string
	// Namespace is the project namespace, protected by the token in TokenFile.
	Namespace string
	TokenFile string
	// OwnerTokenFile holds Compose's own token: it also admits registrations into Namespace and
	// alone grants the owner-only engine functions.
	OwnerTokenFile string
	// DaemonNamespace is where Compose serves compose::* when --namespace names another
	// namespace than the project's; unless it is default it is protected by the same two tokens,
	// so that no other worker can register there before or beside the daemon.
	DaemonNamespace string
}

type worker struct {
	Name   string `yaml:"name"`
	Config any    `yaml:"config,omitempty"`
}

type sandbox struct {
	Adapter   string `yaml:"adapter"`
	Namespace string `yaml:"namespace"`
}

type namespace struct {
	Name           string `yaml:"name"`
	TokenFile      string `yaml:"token_file"`
	OwnerTokenFile string `yaml:"owner_token_file"`
}

type document struct {
	GraceMS    *int64      `yaml:"registration_namespace_grace_ms,omitempty"`
	Workers    []worker    `yaml:"workers"`
	Sandbox    sandbox     `yaml:"sandbox"`
	Namespaces []namespace `yaml:"namespaces"`
}

// HostPort returns the host and port of a ws:// or wss:// engine URL.
func HostPort(raw string) (string, int, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Hostname() == "" {
		return "", 0, fmt.Errorf("engine url %q is not a ws:// or wss:// URL with a host", raw)
	}
	p := u.Port()
	if p == "" {
		if u.Scheme == "wss" {
			return u.Hostname(), 443, nil
		}
		return u.Hostname(), 80, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("engine url %q has a bad port", raw)
	}
	return u.Hostname(), n, nil
}

// Render returns the engine config. iii-worker-manager, always the first entry (the engine's
// main listener), listens on the URL's host and port unless the file configures it; the project namespace is protected by the project token, and
// the owner token (Compose's alone: it publishes configuration entries and binds the router with
// it) is declared beside it, or under OwnerNamespace when the project runs in the default
// namespace, which cannot be protected.
func Render(in Input) ([]byte, error) {
	host, port, err := HostPort(in.URL)
	if err != nil {
		return nil, err
	}
	doc := document{GraceMS: in.GraceMS}
	main := worker{Name: "iii-worker-manager", Config: map[string]any{"host": host, "port": port}}
	for _, name := range in.WorkerOrder {
		cfg := in.Workers[name]
		if m, ok := cfg.(map[string]any); ok && len(m) == 0 {
			cfg = nil
		}
		if name == "iii-worker-manager" {
			m, _ := cfg.(map[string]any)
			merged := main.Config.(map[string]any)
			for k, v := range m {
				merged[k] = v
			}
			continue
		}
		doc.Workers = append(doc.Workers, worker{Name: name, Config: cfg})
	}
	// The main listener, where engine.url points, is the first entry whatever the file's order:
	// the engine's first iii-worker-manager is its main one; iii-worker-manager#<name> entries
	// are further listeners.
	doc.Workers = append([]worker{main}, doc.Workers...)
	adapter := in.SandboxAdapter
	if adapter == "" {
		adapter = DefaultAdapter
	}
	sbNS := in.SandboxNamespace
	if sbNS == "" {
		sbNS = in.Namespace
	}
	doc.Sandbox = sandbox{Adapter: adapter, Namespace: sbNS}
	ns := namespace{Name: in.Namespace, TokenFile: in.TokenFile, OwnerTokenFile: in.OwnerTokenFile}
	if in.Namespace == DefaultNamespace {
		ns = namespace{Name: OwnerNamespace, TokenFile: in.TokenFile, OwnerTokenFile: in.OwnerTokenFile}
		if ns.TokenFile == "" {
			ns.TokenFile = in.OwnerTokenFile
		}
	}
	doc.Namespaces = []namespace{ns}
	if d := in.DaemonNamespace; d != "" && d != in.Namespace && d != DefaultNamespace {
		doc.Namespaces = append(doc.Namespaces, namespace{Name: d, TokenFile: ns.TokenFile, OwnerTokenFile: in.OwnerTokenFile})
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by iii compose for this run; removed after a clean shutdown. Do not edit.\n"), b...), nil
}

// OwnerGrant is the namespaces: entry that lets the holder of ownerTokenFile (Compose) publish
// configuration entries on an engine the user runs: the project namespace protected by the
// project token with Compose's owner token beside it or, for a project in the default namespace
// (which cannot be protected), an otherwise unused namespace named after the owner token file
// (OwnerNamespace, a dash and 8 hex digits, so that several projects each get one) that holds
// both tokens, so that the project's workers, the adapter among them, count as token holders of
// that engine. It is config.yaml text, ready to paste.
func OwnerGrant(namespace, tokenFile, ownerTokenFile string) string {
	name := namespace
	if namespace == DefaultNamespace {
		// default cannot be token-protected: a stand-in namespace carries the tokens, so that
		// the project's workers (the adapter among them) are token holders of this engine.
		sum := sha256.Sum256([]byte(ownerTokenFile))
		name = OwnerNamespace + "-" + hex.EncodeToString(sum[:4])
	}
	return fmt.Sprintf("namespaces:\n  - name: %s\n    token_file: %s\n    owner_token_file: %s\n", scalar(name), scalar(tokenFile), scalar(ownerTokenFile))
}

var plainScalar = regexp.MustCompile(`^[A-Za-z0-9_./+-]+$`)

// scalar writes s as a YAML scalar: plain when that is unambiguous, else double-quoted.
func scalar(s string) string {
	if plainScalar.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}
