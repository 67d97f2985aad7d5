package token

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestEnsureCreatesOwnerOnlyAndKeeps(t *testing.T) {
	dir := t.TempDir()
	p, created, err := Ensure(dir)
	if err != nil || !created {
		t.Fatalf("Ensure = %v, %v", created, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	first, _ := os.ReadFile(p)
	if len(bytes.TrimSpace(first)) != 64 {
		t.Fatalf("token has %d chars, want 64 hex", len(bytes.TrimSpace(first)))
	}
	if _, created, _ := Ensure(dir); created {
		t.Fatal("second Ensure created a new token")
	}
	again, _ := os.ReadFile(p)
	if !bytes.Equal(first, again) {
		t.Fatal("second Ensure changed the token")
	}
}

func TestRotationOnlyAfterExposureAndSafeAdapter(t *testing.T) {
	dir := t.TempDir()
	p, _, _ := Ensure(dir)
	before, _ := os.ReadFile(p)

	if msg, _ := RotateIfExposed(dir, "sandbox-libkrun", "0.3.1"); msg != "" {
		t.Fatalf("rotated without exposure: %s", msg)
	}
	if _, ok, _ := Exposed(dir); ok {
		t.Fatal("Exposed before any record")
	}
	if err := MarkExposed(dir, "api", "0.3.0"); err != nil {
		t.Fatal(err)
	}
	if e, ok, err := Exposed(dir); !ok || err != nil || e.Container != "api" || e.AdapterVersion != "0.3.0" {
		t.Fatalf("Exposed = %+v %v %v", e, ok, err)
	}
	if msg, _ := RotateIfExposed(dir, "sandbox-libkrun", "0.3.0"); msg != "" {
		t.Fatalf("rotated while the adapter still exposes it: %s", msg)
	}
	msg, err := RotateIfExposed(dir, "sandbox-libkrun", "0.3.1")
	if err != nil || !strings.Contains(msg, "replaced the project token") || !strings.Contains(msg, "'api'") {
		t.Fatalf("RotateIfExposed = %q, %v", msg, err)
	}
	after, _ := os.ReadFile(p)
	if bytes.Equal(before, after) {
		t.Fatal("token not replaced")
	}
	if msg, _ := RotateIfExposed(dir, "sandbox-libkrun", "0.3.2"); msg != "" {
		t.Fatal("rotated twice for one exposure")
	}
}

func TestWarnings(t *testing.T) {
	w := Warnings("sandbox-libkrun", "0.2.2", []string{"api"})
	if len(w) != 2 || !strings.Contains(w[0], "observers can read the project token") || !strings.Contains(w[1], "'api'") {
		t.Fatalf("0.2.2 warnings = %q", w)
	}
	if w := Warnings("sandbox-libkrun", "0.3.0", nil); len(w) != 0 {
		t.Fatalf("0.3.0 without a path VM worker warned: %q", w)
	}
	if w := Warnings("sandbox-libkrun", "0.3.0", []string{"api"}); len(w) != 1 {
		t.Fatalf("0.3.0 with a path VM worker: %q", w)
	}
	if w := Warnings("sandbox-libkrun", "0.3.1", []string{"api"}); len(w) != 0 {
		t.Fatalf("0.3.1 warned: %q", w)
	}
}

func TestWarningsCarryTheFixes(t *testing.T) {
	w := Warnings("sandbox-libkrun", "0.2.2", []string{"api"})
	if len(w) != 2 || w[0] != ObserversWarning("sandbox-libkrun", "0.2.2") || !strings.HasSuffix(w[0], RangeFix) {
		t.Fatalf("observers warning = %q", w)
	}
	if w[1] != ExposedWarning("sandbox-libkrun", "0.2.2", "api") || !strings.HasSuffix(w[1], ExposedFix("sandbox-libkrun")) {
		t.Fatalf("exposed warning = %q", w[1])
	}
}

// The owner token of an attached engine is named by the user's engine config, so it survives
// across runs unless it cannot be trusted; it is never the project token.
func TestEnsureOwnerKeepsATrustedFile(t *testing.T) {
	dir := t.TempDir()
	p, err := EnsureOwner(dir)
	if err != nil || p != OwnerPath(dir) {
		t.Fatalf("EnsureOwner = %q, %v", p, err)
	}
	first, _ := os.ReadFile(p)
	if again, _ := EnsureOwner(dir); again != p {
		t.Fatalf("second EnsureOwner = %q", again)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(first, b) {
		t.Fatal("second EnsureOwner changed a trusted owner token")
	}
	if proj, _, _ := Ensure(dir); proj == p {
		t.Fatal("the owner token is the project token file")
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureOwner(dir); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if b, _ := os.ReadFile(p); bytes.Equal(first, b) || st.Mode().Perm() != 0o600 {
		t.Fatalf("a group-readable owner token was kept (mode %v)", st.Mode().Perm())
	}
}

// TestValue: the token as a process worker's III_TOKEN gets it, trimmed; an empty file is an
// error, not an empty token.
func TestValue(t *testing.T) {
	dir := t.TempDir()
	p, _, err := Ensure(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	v, err := Value(p)
	if err != nil || v != strings.TrimSpace(string(raw)) || v == "" {
		t.Fatalf("Value = %q, %v", v, err)
	}
	empty := dir + "/empty"
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Value(empty); err == nil {
		t.Fatal("an empty token file gave a value")
	}
}
