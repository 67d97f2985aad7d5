package vmstate

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestIDDependsOnProjectStateDirAndContainer(t *testing.T) {
	a := ID("/p/shop", "/p/shop/.iii/compose/default", "api")
	if !regexp.MustCompile(`^api-[0-9a-f]{16}$`).MatchString(a) {
		t.Fatalf("vm_id %q", a)
	}
	if a != ID("/p/shop", "/p/shop/.iii/compose/default", "api") {
		t.Fatal("vm_id not stable")
	}
	for _, other := range []string{
		ID("/p/shop2", "/p/shop2/.iii/compose/default", "api"),
		ID("/p/shop", "/s/shop-12345678/default", "api"),
		ID("/p/shop", "/p/shop/.iii/compose/default", "web"),
	} {
		if other == a {
			t.Fatalf("vm_id %q did not change", other)
		}
	}
	if id := ID("/p", "/s", "Weird Name!"); !strings.HasPrefix(id, "weird-name-") {
		t.Fatalf("sanitised id %q", id)
	}
}

type fakeCaller struct {
	fn      string
	payload any
	err     error
}

func (f *fakeCaller) Call(_ context.Context, fn string, p any) (json.RawMessage, error) {
	f.fn, f.payload = fn, p
	return nil, f.err
}

func TestDeleteCallsTheAdapterPrefix(t *testing.T) {
	c := &fakeCaller{}
	if err := Delete(context.Background(), c, "my-adapter", "api-00"); err != nil {
		t.Fatal(err)
	}
	if c.fn != "my-adapter::worker::delete" || c.payload.(map[string]any)["vm_id"] != "api-00" {
		t.Fatalf("called %s %v", c.fn, c.payload)
	}
	c.err = errors.New("S301")
	if err := Delete(context.Background(), c, "sandbox-libkrun", "x"); err == nil {
		t.Fatal("error swallowed")
	}
}

func TestWarningNamesEverything(t *testing.T) {
	w := Warning("api", "sandbox-libkrun", "api-0123", "/home/u", "the engine had already stopped")
	for _, s := range []string{"'api'", "'sandbox-libkrun'", "api-0123", "/home/u/.iii/sandbox/workers/api-0123", "engine had already stopped"} {
		if !strings.Contains(w, s) {
			t.Errorf("warning lacks %q: %s", s, w)
		}
	}
}
