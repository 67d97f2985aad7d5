package composefile

import (
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/compose/errcode"
)

func env(vars map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// rejections are compose files the parser refuses, with the code and a part of the message.
var rejections = []struct {
	name, code, want, yaml string
}{
	{"unknown top key", errcode.InvalidComposeFile, `line 2: unknown key "nope" in the top level`, "containers: {a: {worker: path://.}}\nnope: 1\n"},
	{"unknown container key", errcode.InvalidComposeFile, `unknown key "image" in containers.a`, "containers:\n  a:\n    worker: path://.\n    image: x\n"},
	{"duplicate key", errcode.InvalidComposeFile, `line 4: duplicate key "worker" in containers.a (first on line 3)`, "containers:\n  a:\n    worker: path://.\n    worker: path://x\n"},
	{"duplicate container", errcode.InvalidComposeFile, `duplicate key "a" in containers`, "containers:\n  a: {worker: path://.}\n  a: {worker: path://.}\n"},
	{"null workers", errcode.InvalidComposeFile, "write workers: {}", "engine:\n  workers:\n"},
	{"bad duration", errcode.InvalidDuration, `"30" is not a duration`, "startup_timeout: 30\nengine: {}\n"},
	{"duration unit", errcode.InvalidDuration, `"2 minutes"`, "engine: {}\ncontainers:\n  a: {worker: path://., startup_timeout: 2 minutes}\n"},
	{"undefined var", errcode.UndefinedVariable, "${NOPE} is not set", "containers:\n  a:\n    worker: path://.\n    environment: {X: \"${NOPE}\"}\n"},
	{"unterminated", errcode.UnterminatedReference, "without a closing }", "containers:\n  a:\n    worker: path://.\n    environment: {X: \"${NOPE\"}\n"},
	{"invalid ref", errcode.InvalidReference, "${1X} is not a valid reference", "containers:\n  a:\n    worker: path://.\n    environment: {X: \"${1X}\"}\n"},
	{"unknown dep", errcode.UnknownDependency, `names "b"`, "containers:\n  a: {worker: path://., start_after: [b]}\n"},
	{"self dep", errcode.SelfDependency, "lists a itself", "containers:\n  a: {worker: path://., start_after: [a]}\n"},
	{"cycle", errcode.DependencyCycle, "a -> b -> c -> a", "containers:\n  a: {worker: path://., start_after: [b]}\n  b: {worker: path://., depends_on: [c]}\n  c: {worker: path://., start_after: [a]}\n"},
	{"bad source", errcode.UnsupportedWorkerSource, `"docker://x" is neither`, "containers:\n  a: {worker: docker://x}\n"},
	{"no version", errcode.MissingVersionForPackage, "needs a version", "containers:\n  a: {worker: package://state}\n"},
	{"run for package", errcode.RunNotAllowedForPackage, "scripts.run", "containers:\n  a: {worker: package://state, version: '1', scripts: {run: x}}\n"},
	{"pre_run_timeout alone", errcode.PreRunTimeoutWithoutPreRun, "set scripts.pre_run", "containers:\n  a: {worker: path://., scripts: {pre_run_timeout: 5s}}\n"},
	{"reserved env", errcode.ReservedEnvOverride, "III_URL", "containers:\n  a: {worker: path://., environment: {III_URL: x}}\n"},
	{"bad namespace", errcode.InvalidNamespace, `"Shop"`, "namespace: Shop\nengine: {}\n"},
	{"empty", errcode.EmptyContainers, "is empty", ""},
	{"no containers attach", errcode.EmptyContainers, "declares no containers", "engine:\ncontainers: {}\n"},
	{"not yaml", errcode.InvalidComposeFile, "is not valid compose YAML", "containers: [\n"},
	{"two docs", errcode.InvalidComposeFile, "exactly one YAML document", "engine: {}\n---\nengine: {}\n"},
	{"engine worker", errcode.UnsupportedEngineWorker, `"state" is not an engine-owned worker`, "engine:\n  workers: {state: {}}\n"},
	{"injected", errcode.EngineWorkerIsInjected, "iii-telemetry", "engine:\n  workers: {iii-telemetry: {}}\n"},
	{"worker config", errcode.InvalidEngineWorkerConfig, "must be a mapping", "engine:\n  workers: {iii-stream: 3}\n"},
	{"stream bridge", errcode.ConfigUnsupported, `:5: engine.workers.iii-stream.adapter.name: "bridge" is iii's and not supported`,
		"engine:\n  workers:\n    iii-stream:\n      adapter:\n        name: bridge\n        config: {bridge_url: ws://localhost:49198}\n"},
	{"blank url", errcode.InvalidManagedEngineURL, "not an engine URL", "engine:\n  url: ''\n"},
	{"null sandbox", errcode.InvalidComposeFile, "sandbox: {}", "engine:\n  sandbox:\n"},
	{"sandbox key", errcode.InvalidComposeFile, `unknown key "image" in engine.sandbox`, "engine:\n  sandbox: {image: x}\n"},
	{"alias", errcode.InvalidComposeFile, "anchors and aliases", "containers:\n  a: &a {worker: path://.}\n  b: *a\n"},
	{"bad restart", errcode.InvalidComposeFile, `"sometimes" is not a restart policy`, "containers:\n  a: {worker: path://., restart: sometimes}\n"},
	{"bad required", errcode.InvalidComposeFile, "containers.a.required must be true or false", "containers:\n  a: {worker: path://., required: 'no'}\n"},
	{"moved", errcode.SandboxConfigMoved, "engine.workers.iii-sandbox moved", "engine:\n  workers:\n    iii-sandbox: {}\n"},
}

func TestParseRejections(t *testing.T) {
	for _, c := range rejections {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("/proj/worker-compose.yaml", []byte(c.yaml), env(nil))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			e := errcode.As(err, "")
			if e.Code != c.code || !strings.Contains(e.Message, c.want) || !strings.Contains(e.Message, "/proj/worker-compose.yaml") {
				t.Fatalf("got %s: %s\nwant %s containing %q and the file name", e.Code, e.Message, c.code, c.want)
			}
		})
	}
}

func TestParseFull(t *testing.T) {
	src := `namespace: shop
startup_timeout: 2m
engine:
  url: ws://127.0.0.1:${PORT:-49134}
  workers: {}
  sandbox: {}
containers:
  api:
    worker: path://./workers/api
    start_after: [state]
    environment:
      LOG: ${LOG:-info}
      LIT: $${HOME}
      BARE: $HOME
    scripts: {pre_run: make, run: ./api}
  state:
    worker: package://api.workers.iii.dev/state
    version: "0.22.2"
    startup_timeout: 500ms
    config_override: {adapter: {name: kv}}
`
	f, err := Parse("/proj/worker-compose.yaml", []byte(src), env(map[string]string{"PORT": "5000"}))
	if err != nil {
		t.Fatal(err)
	}
	if f.Namespace != "shop" || f.StartupTimeout != 2*time.Minute || f.Engine == nil || f.Engine.URL != "ws://127.0.0.1:5000" {
		t.Fatalf("top level: %+v %+v", f, f.Engine)
	}
	if f.Engine.Sandbox == nil || f.Engine.Sandbox.Adapter != DefaultSandboxAdapter || f.Engine.Sandbox.NamespaceFor("shop") != "shop" || len(f.Engine.Workers) != 0 {
		t.Fatalf("sandbox: %+v", f.Engine.Sandbox)
	}
	api, state := f.Containers["api"], f.Containers["state"]
	if api.Source.Kind != PathSource || api.Source.Dir != "/proj/workers/api" || api.Environment["LOG"] != "info" ||
		api.Environment["LIT"] != "${HOME}" || api.Environment["BARE"] != "$HOME" || api.Scripts.PreRunTimeout != DefaultPreRunTimeout {
		t.Fatalf("api: %+v", api)
	}
	if state.Source.Host != "api.workers.iii.dev" || state.Source.Name != "state" || state.Version != "0.22.2" || state.StartupTimeout != 500*time.Millisecond {
		t.Fatalf("state: %+v", state)
	}
	if got := strings.Join(f.StartOrder(), ","); got != "state,api" {
		t.Fatalf("start order %s", got)
	}
}

func TestAttachModes(t *testing.T) {
	for _, src := range []string{"containers: {a: {worker: path://.}}\n", "engine:\ncontainers: {a: {worker: path://.}}\n"} {
		f, err := Parse("c.yaml", []byte(src), env(nil))
		if err != nil || f.Engine != nil {
			t.Fatalf("%q: engine=%v err=%v", src, f, err)
		}
	}
	f, err := Parse("c.yaml", []byte("engine: {}\n"), env(nil))
	if err != nil || f.Engine == nil || f.Engine.URL != DefaultEngineURL {
		t.Fatalf("managed: %v %v", f, err)
	}
}

func TestSandboxMovedMessage(t *testing.T) {
	src := `namespace: shop
engine:
  workers:
    iii-worker-manager: {port: 49134}
    iii-sandbox:
      auto_install: true
      image_allowlist: [python, node]
      custom_images: {py312: "docker.io/library/python:3.12"}
      default_memory_mb: 512
`
	_, err := Parse("/p/worker-compose.yaml", []byte(src), env(nil))
	e := errcode.As(err, "")
	if e.Code != errcode.SandboxConfigMoved {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{"/p/worker-compose.yaml:5", "keep the other entries", "namespace: shop",
		"worker: package://api.workers.iii.dev/sandbox-libkrun", "version: '^0.3'", "config_override:",
		"auto_install: true", "image_allowlist: [python, node]", "py312: \"docker.io/library/python:3.12\"", "default_memory_mb: 512"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message lacks %q:\n%s", want, e.Message)
		}
	}
	if strings.Contains(e.Message, "workers: {}") {
		t.Errorf("iii-sandbox was not the only entry, yet the message says workers: {}:\n%s", e.Message)
	}
}

func TestSandboxMovedWithAdapterDeclared(t *testing.T) {
	src := "engine:\n  workers:\n    iii-sandbox#old: {default_cpus: 2}\ncontainers:\n  sandbox-libkrun: {worker: package://sandbox-libkrun, version: '^0.3'}\n"
	_, err := Parse("/p/c.yaml", []byte(src), env(nil))
	e := errcode.As(err, "")
	if e.Code != errcode.SandboxConfigMoved || !strings.Contains(e.Message, "already declares the sandbox-libkrun container") ||
		!strings.Contains(e.Message, "config_override:\n  default_cpus: 2") || !strings.Contains(e.Message, "write `workers: {}`") {
		t.Fatalf("%v", err)
	}
}
