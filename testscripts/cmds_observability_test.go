package testscripts

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("otlpsink", cmdOTLPSink)
}

// otlpsink VAR FILE: a small OTLP/HTTP trace collector on 127.0.0.1 until the script ends. It
// sets VAR to its base URL (the engine's endpoint), answers every POST /v1/traces with an empty
// protobuf ExportTraceServiceResponse, and appends each request body (protobuf, whose strings
// such as span names are readable) to FILE; any other request is 404 and logged.
func cmdOTLPSink(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: otlpsink VAR FILE")
	}
	f, err := os.OpenFile(ts.MkAbs(args[1]), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	ts.Check(err)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || err != nil ||
			!strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-protobuf") {
			ts.Logf("otlpsink: refused %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		_, _ = f.Write(body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	ts.Defer(func() {
		srv.Close()
		f.Close()
	})
	ts.Setenv(args[0], srv.URL)
}
