package testscripts

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("headersink", cmdHeaderSink)
}

// headersink VAR FILE: serve HTTP on 127.0.0.1 until the script ends, set VAR to its base URL,
// answer every request 200 {"ok":true} and append to FILE the request line ("METHOD PATH")
// followed by each header as "Name: value", sorted: what an outgoing request of the engine (an
// HTTP-invoked function) carried, its auth headers included.
func cmdHeaderSink(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: headersink VAR FILE")
	}
	f, err := os.OpenFile(ts.MkAbs(args[1]), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	ts.Check(err)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s\n", r.Method, r.URL.Path)
		for _, k := range slices.Sorted(maps.Keys(r.Header)) {
			for _, v := range r.Header[k] {
				fmt.Fprintf(&b, "%s: %s\n", k, v)
			}
		}
		mu.Lock()
		_, _ = f.WriteString(b.String())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	ts.Defer(func() {
		srv.Close()
		f.Close()
	})
	ts.Setenv(args[0], srv.URL)
}
