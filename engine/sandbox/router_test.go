package sandbox

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFillTruncation(t *testing.T) {
	cases := map[string]string{
		`{"stdout":"a","exit_code":0}`: `{"exit_code":0,"stderr_truncated":false,"stdout":"a","stdout_truncated":false}`,
		`{"stdout_truncated":true}`:    `{"stderr_truncated":false,"stdout_truncated":true}`,
		`[1,2]`:                        `[1,2]`,
		`null`:                         `null`,
		`{"stdout_truncated":true,"stderr_truncated":true}`: `{"stderr_truncated":true,"stdout_truncated":true}`,
	}
	for in, want := range cases {
		var g, w any
		_ = json.Unmarshal(fillTruncation(json.RawMessage(in)), &g)
		_ = json.Unmarshal([]byte(want), &w)
		if d := cmp.Diff(w, g); d != "" {
			t.Errorf("%s: %s", in, d)
		}
	}
}

func TestEnvelope(t *testing.T) {
	var got map[string]any
	_ = json.Unmarshal(unbound("exec").Raw(), &got)
	for _, k := range []string{"type", "code", "message", "docs_url", "retryable", "fix", "fix_note"} {
		if _, ok := got[k]; !ok {
			t.Errorf("envelope lacks %s: %v", k, got)
		}
	}
	if got["docs_url"] != "https://iii.dev/docs/using-iii/sandboxes#s303" {
		t.Errorf("docs_url %v", got["docs_url"])
	}
}
