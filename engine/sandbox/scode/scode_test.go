package scode

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEnvelope(t *testing.T) {
	for code := range table {
		e := New(code, "m")
		if e.DocsURL != "https://iii.dev/docs/using-iii/sandboxes#"+strings.ToLower(code) {
			t.Fatalf("%s: docs_url %s", code, e.DocsURL)
		}
		if e.Retryable != (code == S102 || code == S218 || code == S232) {
			t.Fatalf("%s: retryable %v", code, e.Retryable)
		}
		if e.Type == "" {
			t.Fatalf("%s: no type", code)
		}
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(NotFound("x").Error()), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"type", "code", "message", "docs_url", "retryable", "fix", "fix_note"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("envelope lacks %s: %v", k, got)
		}
	}
	if got["fix"] != nil || got["message"] != "sandbox not found: x" {
		t.Fatalf("envelope %v", got)
	}
	fs := FS(S211, "parent directory not found: /a").WithFix(map[string]bool{"parents": true})
	if string(fs.Fix) != `{"parents":true}` || fs.FixNote != nil || fs.Type != TypeFilesystem {
		t.Fatalf("fs envelope %+v", fs)
	}
}
