package daemon

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every compose::* function has a handler and the description it registers; only up, down and
// restart run under Register's mutation lock, because add, remove and update take it inside
// their operation (taking it twice would deadlock them).
func TestFunctionTable(t *testing.T) {
	fns := (&Daemon{}).functions()
	var locked []string
	for id, f := range fns {
		if f.handler == nil || f.desc == "" || f.timeout <= 0 {
			t.Errorf("%s: handler %v, desc %q, timeout %v", id, f.handler != nil, f.desc, f.timeout)
		}
		if f.mut {
			locked = append(locked, id)
		}
	}
	if diff := cmp.Diff([]string{FnDown, FnRestart, FnUp}, slices.Sorted(slices.Values(locked))); diff != "" {
		t.Errorf("functions under the mutation lock (-want +got):\n%s", diff)
	}
	if n := len(fns); n != 14 {
		t.Errorf("%d compose::* functions, want 14", n)
	}
}
