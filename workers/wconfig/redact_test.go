package wconfig

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	if got := RedactURL("wss://user:secret@engine:1/ws?token=abc"); strings.Contains(got, "secret") || strings.Contains(got, "abc") {
		t.Errorf("RedactURL = %s", got)
	}
}
