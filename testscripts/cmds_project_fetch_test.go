package testscripts

import (
	"encoding/pem"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	registerCmd("httpsserve", cmdHTTPSServe)
}

// httpsserve DIR | httpsserve -redirect URL: serve DIR over https on 127.0.0.1 until the script
// ends, or answer every request with a 302 to URL followed by the request's path; set HTTPS_URL
// to the server and SSL_CERT_FILE to a file holding its certificate, so the iii binaries the
// script runs trust it (every server this command starts shares that certificate).
func cmdHTTPSServe(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("httpsserve", flag.ContinueOnError)
	redirect := fs.String("redirect", "", "redirect every request to this URL")
	if neg || fs.Parse(args) != nil || fs.NArg() != 0 && *redirect != "" || fs.NArg() != 1 && *redirect == "" {
		ts.Fatalf("usage: httpsserve DIR | httpsserve -redirect URL")
	}
	var h http.Handler
	if *redirect != "" {
		to := *redirect
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to+r.URL.Path, http.StatusFound)
		})
	} else {
		h = http.FileServer(http.Dir(ts.MkAbs(fs.Arg(0))))
	}
	srv := httptest.NewTLSServer(h)
	ts.Defer(srv.Close)
	cert := filepath.Join(ts.MkAbs(""), ".httpsserve-cert.pem")
	ts.Check(os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	ts.Setenv("HTTPS_URL", srv.URL)
	ts.Setenv("SSL_CERT_FILE", cert)
}
