package errcode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestNewWrapsTheCause(t *testing.T) {
	e := New(ConfigInvalid, "reading %s: %w", "config.yaml", fs.ErrNotExist)
	if e.Message != "reading config.yaml: file does not exist" || e.Error() != "CONFIG_INVALID: "+e.Message {
		t.Fatalf("message %q, Error %q", e.Message, e.Error())
	}
	if !errors.Is(e, fs.ErrNotExist) {
		t.Fatal("errors.Is does not see the cause through the coded error")
	}
	if New(Usage, "no %s", "cause").Err != nil {
		t.Fatal("a message built without %w has a cause")
	}
	two := New(ConfigInvalid, "%w; restoring failed too: %w", fs.ErrPermission, fs.ErrNotExist)
	if !errors.Is(two, fs.ErrPermission) || !errors.Is(two, fs.ErrNotExist) {
		t.Fatalf("errors.Is does not see both causes of %v", two)
	}
}

func TestCodeOfAndAs(t *testing.T) {
	wrapped := fmt.Errorf("starting: %w", New(ListenFailed, "port taken"))
	if got := CodeOf(wrapped); got != ListenFailed {
		t.Fatalf("CodeOf = %q", got)
	}
	if got := CodeOf(errors.New("plain")); got != "" {
		t.Fatalf("CodeOf(plain) = %q", got)
	}
	if e := As(errors.New("plain"), Unknown); e.Code != Unknown || e.Message != "plain" {
		t.Fatalf("As(plain) = %+v", e)
	}
	if e := As(wrapped, Unknown); e.Code != ListenFailed || e.Message != "port taken" {
		t.Fatalf("As(wrapped) = %+v", e)
	}
}

func TestExit(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		out    string
	}{
		{nil, 0, ""},
		{New(ConfigNotFound, "config file x does not exist"), 1, "error[CONFIG_NOT_FOUND]: config file x does not exist\n"},
		{Usagef(Usage, "unexpected argument %q", "x"), 2, "error[USAGE]: unexpected argument \"x\"\n"},
		{fmt.Errorf("outer: %w", Usagef(Usage, "inner")), 2, "error[USAGE]: inner\n"},
		{errors.New("plain"), 1, "error[UNKNOWN]: plain\n"},
	} {
		var b bytes.Buffer
		if got := Exit(&b, tc.err, Unknown); got != tc.status || b.String() != tc.out {
			t.Errorf("Exit(%v) = %d, %q; want %d, %q", tc.err, got, b.String(), tc.status, tc.out)
		}
	}
}

func TestLine(t *testing.T) {
	if got := Line(New(Usage, "bad flag")); got != "error[USAGE]: bad flag" {
		t.Errorf("Line(coded) = %q", got)
	}
	if got := Line(errors.New("asset not found")); got != "error: asset not found" {
		t.Errorf("Line(plain) = %q", got)
	}
}
