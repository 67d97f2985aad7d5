package causecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVerbs(t *testing.T) {
	for format, want := range map[string]string{
		"plain": "", "%s: %v": "sv", "%w": "w", "100%% %d": "d", "%-8s|%*d|%.2f": "s*df", "%+v %#v %q": "vvq",
	} {
		if d := cmp.Diff(want, string(Verbs(format))); d != "" {
			t.Errorf("Verbs(%q): %s", format, d)
		}
	}
}

// TestFind shows what counts as an error constructor: fmt.Errorf and a package's own
// (format, args...) helper are checked, a wire body is reported as one (not a fault), and a
// function that returns no error is not looked at.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.26\n",
		"m.go": `package m

import "fmt"

func helper(format string, args ...any) error { return fmt.Errorf(format, args...) }

func wire(format string, args ...any) error { return fmt.Errorf(format, args...) }

func flattened(err error) error { return fmt.Errorf("a: %v", err) }

func kept(err error) error { return fmt.Errorf("b: %w", err) }

func throughHelper(err error) error { return helper("c %d: %s", 1, err) }

func body(err error) error { return wire("d: %v", err) }

func text(err error) string { return fmt.Sprintf("e: %v", err) }
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOWORK", "off")
	WireBodies["example.com/m.wire"] = "a body for the test"
	t.Cleanup(func() { delete(WireBodies, "example.com/m.wire") })
	found, err := Find(dir, "./...")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%d %s %s %d %s %t", f.Pos.Line, f.Verb, f.Arg, f.Index, f.Callee, f.Wire))
	}
	want := []string{"9 %v err 0 fmt.Errorf false", "13 %s err 1 example.com/m.helper false", "15 %v err 0 example.com/m.wire true"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
}
