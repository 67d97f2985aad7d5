package registry

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

// compatFixture publishes "state" as this project publishes it: build 0.1.0, serving iii's 0.21
// and 0.22 lines.
func compatFixture(t *testing.T) *Client {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Publish(root, Package{Name: "state", Version: "0.1.0", Type: TypeBinary,
		Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin}, IIILines: []string{"0.21", "0.22"}}); err != nil {
		t.Fatal(err)
	}
	c, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompatTableMapsIIIPins(t *testing.T) {
	c := compatFixture(t)
	ctx := context.Background()
	for sel, line := range map[string]string{
		"0.22.2": "0.22", "0.21.4": "0.21", "0.21.4-alpha.4": "0.21", "^0.22": "0.22", "~0.21.3": "0.21",
		">=0.21": "0.22", ">=0.21.0 <0.22.0": "0.21", ">0.21.9": "0.22", "0.22.x": "0.22", "<0.22.0 >0.21.3": "0.21",
	} {
		v, got, err := c.Resolve(ctx, "state", sel)
		if err != nil || got == nil || got.III != line || v.Version != "0.1.0" {
			t.Errorf("Resolve(%q) = %v, %+v, %v; want 0.1.0 through line %s", sel, v, got, err, line)
		}
	}
	// A published version that satisfies the pin is used as is, without the table.
	for _, sel := range []string{"0.1.0", "latest", "*", "", "^0.1"} {
		v, got, err := c.Resolve(ctx, "state", sel)
		if err != nil || got != nil || v.Version != "0.1.0" {
			t.Errorf("Resolve(%q) = %v, %+v, %v; want 0.1.0 directly", sel, v, got, err)
		}
	}
}

func TestCompatTableNeverSubstitutesOutsideItsLines(t *testing.T) {
	c := compatFixture(t)
	for _, sel := range []string{"0.23.0", "^0.23", "1.0.0", ">=0.23", "~0.20.1", "0.20.9", "~0.22.0 <0.22.0"} {
		_, _, err := c.Resolve(context.Background(), "state", sel)
		if errcode.CodeOf(err) != errcode.PackageNotResolved {
			t.Fatalf("Resolve(%q): %v, want PACKAGE_NOT_RESOLVED", sel, err)
		}
		want := "no version of 'state' satisfies '" + sel + "' (published: 0.1.0), and it is on none of iii's version lines the registry's compatibility table serves (iii 0.22 → 0.1.0, iii 0.21 → 0.1.0)"
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%q): %v\nwant it to say %s", sel, err, want)
		}
	}
}

func TestCompatTablePublishKeepsTheHighestBuildPerLine(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(t.TempDir(), "http")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		v     string
		lines []string
	}{{"0.2.0", []string{"0.21", "0.22"}}, {"0.1.0", []string{"0.21"}}, {"0.3.0", []string{"0.23"}}} {
		if err := Publish(root, Package{Name: "http", Version: p.v, Type: TypeBinary,
			Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin}, IIILines: p.lines}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "workers", "http", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ix Index
	if err := json.Unmarshal(b, &ix); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(ix.Compat)
	if want := `[{"iii":"0.23","build":"0.3.0"},{"iii":"0.22","build":"0.2.0"},{"iii":"0.21","build":"0.2.0"}]`; string(got) != want {
		t.Errorf("iii_compat = %s, want %s", got, want)
	}
	if err := Publish(root, Package{Name: "http", Version: "0.4.0", Type: TypeBinary,
		Artifacts: map[string]string{"x86_64-unknown-linux-gnu": bin}, IIILines: []string{"latest"}}); err == nil {
		t.Error("a line that is not MAJOR.MINOR was published")
	}
}

func TestCompatTableRowToAnUnpublishedBuildIsRefused(t *testing.T) {
	ix := &Index{Name: "queue", Versions: []Version{{Version: "0.1.0", Type: TypeBinary}},
		Compat: []CompatLine{{III: "0.21", Build: "0.9.0"}}}
	_, _, err := ix.Select("0.21.5")
	if errcode.CodeOf(err) != errcode.PackageNotResolved || !strings.Contains(err.Error(), "maps iii 0.21 onto build 0.9.0, which is not published") {
		t.Errorf("Select: %v", err)
	}
	ix.Compat = []CompatLine{{III: "0.21.x", Build: "0.1.0"}}
	if _, _, err := ix.Select("0.21.5"); errcode.CodeOf(err) != errcode.PackageNotResolved || !strings.Contains(err.Error(), `line "0.21.x"`) {
		t.Errorf("Select with a bad line: %v", err)
	}
}
