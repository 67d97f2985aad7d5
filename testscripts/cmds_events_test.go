package testscripts

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// The product workers of issue 17 (workers/cmd/*), built for the events/ scenarios under the
// names Compose runs them by.
func init() {
	for _, name := range []string{"state", "queue", "cron", "http"} {
		registerBinary(binary{name: name, pkg: "./workers/cmd/" + name, vfile: "workers/VERSION"})
	}
	registerCmd("httpreq", cmdHTTPReq)
}

// httpreq METHOD URL [BODY] [HEADER:VALUE...]: one HTTP request (10 s deadline); stdout gets
// "<status>" on its first line, then the body. The URL must be on 127.0.0.1.
func cmdHTTPReq(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: httpreq METHOD URL [BODY] [HEADER:VALUE...]")
	}
	if !strings.HasPrefix(args[1], "http://127.0.0.1:") {
		ts.Fatalf("httpreq: only http://127.0.0.1 URLs")
	}
	body := ""
	if len(args) > 2 {
		body = args[2]
	}
	req, err := http.NewRequest(args[0], args[1], strings.NewReader(body))
	ts.Check(err)
	for _, h := range args[min(3, len(args)):] {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	ts.Check(err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%d\n%s", res.StatusCode, b)
}
