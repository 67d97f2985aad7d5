package dirlock

import (
	"testing"
	"time"
)

func TestLockExcludes(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir, ".lock")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		u, err := Lock(dir, ".lock")
		if err == nil {
			u()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second Lock went through while the first was held")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the second Lock never went through after the release")
	}
}
