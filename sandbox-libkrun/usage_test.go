package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

// A command-line mistake prints error[USAGE]: message and exits 2, as every iii command does.
func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"extra"}, {"--prefix", "a:b"}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		saved := os.Stderr
		os.Stderr = w
		status := run(args)
		os.Stderr = saved
		w.Close()
		out, _ := io.ReadAll(r)
		r.Close()
		if status != 2 || !strings.HasPrefix(string(out), "error[USAGE]: ") {
			t.Errorf("sandbox-libkrun %q: exit %d, stderr %q; want 2 and error[USAGE]", args, status, out)
		}
	}
}
