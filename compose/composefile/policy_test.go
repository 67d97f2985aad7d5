package composefile

import (
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

func TestRestartAndRequired(t *testing.T) {
	f, err := Parse("/p/worker-compose.yaml", []byte("containers:\n  a: {worker: path://.}\n  b: {worker: path://., restart: on-failure, required: false}\n  c: {worker: path://., restart: always}\n  d: {worker: path://., restart: no}\n  e: {worker: path://., restart: 'no'}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": RestartNo, "b": RestartOnFailure, "c": RestartAlways, "d": RestartNo, "e": RestartNo} {
		if got := f.Containers[k].Restart; got != want {
			t.Errorf("%s: restart %q, want %q", k, got, want)
		}
	}
	if !f.Containers["a"].Required || f.Containers["b"].Required {
		t.Errorf("required: a %v, b %v", f.Containers["a"].Required, f.Containers["b"].Required)
	}
	for _, bad := range []string{"restart: sometimes", "restart: [always]", "required: maybe", "required: 1", "restart:"} {
		_, err := Parse("/p/worker-compose.yaml", []byte("containers:\n  a:\n    worker: path://.\n    "+bad+"\n"), env(nil))
		if e := errcode.As(err, ""); err == nil || e.Code != errcode.InvalidComposeFile || !strings.Contains(e.Message, "containers.a.re") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
