package composefile

import (
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

// FuzzParse feeds arbitrary bytes to the parser: it must never panic, and every rejection must
// be a coded error that names the file.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"", "engine: {}\n", "engine:\n  workers:\n",
		"containers:\n  a: {worker: path://., start_after: [b]}\n  b: {worker: path://., start_after: [a]}\n",
		"namespace: shop\nengine:\n  workers:\n    iii-sandbox: {auto_install: true, image_allowlist: [python]}\n",
		"containers:\n  a:\n    worker: package://x\n    version: ^0.3\n    environment: {A: \"${B:-c}\", D: $${E}}\n",
		"containers:\n  a: &x {worker: path://.}\n  b: *x\n", "engine: {sandbox: {adapter: a, namespace: b}}\n",
		"startup_timeout: 500ms\nstop_timeout: 2m\nengine:\n  url: ws://h:1\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	const path = "/fuzz/worker-compose.yaml"
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(path, data, func(k string) (string, bool) { return "v", k == "SET" })
		if err == nil {
			if file == nil || (len(file.Containers) == 0 && file.Engine == nil) {
				t.Fatalf("accepted an empty project: %q", data)
			}
			file.StartOrder()
			return
		}
		e := errcode.As(err, "")
		if e.Code == "" || !strings.Contains(e.Message, path) {
			t.Fatalf("rejection without a code or the file name: %v (input %q)", err, data)
		}
	})
}

// TestYAMLErrorKeepsItsCause: a compose file that is not YAML is INVALID_COMPOSE_FILE whose
// message drops yaml's "yaml: " prefix and whose cause is yaml's error itself.
func TestYAMLErrorKeepsItsCause(t *testing.T) {
	_, err := Parse("/p/worker-compose.yaml", []byte("containers: [\n"), func(string) (string, bool) { return "", false })
	e := errcode.As(err, "")
	if e.Code != errcode.InvalidComposeFile || strings.Contains(e.Message, "yaml: ") || e.Err == nil || !strings.HasPrefix(e.Err.Error(), "yaml: ") {
		t.Fatalf("got %#v", e)
	}
}
