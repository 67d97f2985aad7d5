package causecheck

import (
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
