package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/errcode"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/usertoken"
)

const callUsage = `Usage: iii call FUNCTION [KEY=VALUE ...] [flags]      (aliases: iii trigger, iii t)

Calls FUNCTION through a running engine and prints its result as JSON.

Payload: no arguments send {}; KEY=VALUE pairs build an object (each VALUE is read as JSON
when it parses, else as a string: a=10 name=alice -> {"a":10,"name":"alice"}); --json sends
any JSON; both together need a JSON object, and the pairs override its keys.

Flags:
  --json JSON           the payload as JSON
  -n, --namespace NS    call FUNCTION in namespace NS (default: default)
  --address HOST        engine host (default 127.0.0.1)
  --port PORT           engine port (default 49134)
  --timeout-ms N        give up after N milliseconds (default 30000)
  -h, --help            show this help

Without --address and --port the engine URL is $III_URL when set.

Token: the call presents the token in $III_TOKEN_FILE, else $III_TOKEN, else the project token
of the Compose that serves this engine and namespace for you (it lists it in
~/.iii/compose/tokens/<host>_<port>_<namespace> while it runs). Functions a worker registered
as protected, such as compose::*, answer FORBIDDEN to a call without it.
The result goes to stdout; a function error goes to stderr as JSON and the exit code is 1.
`

type callArgs struct {
	fn        string
	payload   json.RawMessage
	namespace *string
	url       string
	timeout   time.Duration
	help      bool
}

func parseCall(args []string) (*callArgs, error) {
	a := &callArgs{timeout: 30 * time.Second}
	var jsonArg *string
	var host, port string
	kv := map[string]json.RawMessage{}
	var keys []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, val, hasVal := strings.Cut(arg, "=")
		next := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch {
		case arg == "-h" || arg == "--help":
			a.help = true
		case name == "--json":
			var v string
			v, err = next()
			jsonArg = &v
		case name == "-n" || name == "--namespace":
			var v string
			v, err = next()
			a.namespace = &v
		case name == "--address":
			host, err = next()
		case name == "--port":
			port, err = next()
		case name == "--timeout-ms":
			var v string
			if v, err = next(); err == nil {
				n, perr := strconv.Atoi(v)
				if perr != nil || n <= 0 {
					return nil, fmt.Errorf("--timeout-ms must be a positive integer, got `%s`", v)
				}
				a.timeout = time.Duration(n) * time.Millisecond
			}
		case strings.HasPrefix(arg, "-") && a.fn != "" && !strings.Contains(arg, "="):
			return nil, fmt.Errorf("unknown flag %s", arg)
		case a.fn == "" && !strings.Contains(arg, "=") && !strings.HasPrefix(arg, "-"):
			a.fn = arg
		default:
			if !hasVal {
				return nil, fmt.Errorf("expected key=value, got `%s`", arg)
			}
			if name == "" {
				return nil, fmt.Errorf("payload key must not be empty (got `%s`)", arg)
			}
			if _, dup := kv[name]; !dup {
				keys = append(keys, name)
			}
			if json.Valid([]byte(val)) {
				kv[name] = json.RawMessage(val)
			} else {
				kv[name], _ = json.Marshal(val)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if a.fn == "" && !a.help {
		return nil, errors.New("missing FUNCTION. Try: `iii call <function> [key=value ...]`")
	}
	switch {
	case a.help:
	case jsonArg == nil && len(kv) == 0:
		a.payload = json.RawMessage("{}")
	case jsonArg != nil && !json.Valid([]byte(*jsonArg)):
		return nil, fmt.Errorf("--json: invalid JSON `%s`", *jsonArg)
	case jsonArg != nil && len(kv) == 0:
		a.payload = json.RawMessage(*jsonArg)
	case jsonArg == nil:
		a.payload = orderedObject(keys, kv)
	default:
		obj := map[string]json.RawMessage{}
		if jsonArg != nil {
			if err := json.Unmarshal([]byte(*jsonArg), &obj); err != nil || obj == nil {
				return nil, errors.New("--json must be an object when combined with key=value pairs")
			}
		}
		for _, k := range keys {
			obj[k] = kv[k]
		}
		a.payload, _ = json.Marshal(obj)
	}
	a.url = os.Getenv(protocol.EnvURL)
	if host != "" || port != "" || a.url == "" {
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "49134"
		}
		a.url = "ws://" + net.JoinHostPort(host, port)
	}
	return a, nil
}

// orderedObject renders the pairs as a JSON object in the order they were given.
func orderedObject(keys []string, kv map[string]json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(kv[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// RunCall runs `iii call FN k=v ...` and returns the process exit code.
func RunCall(args []string) int {
	a, err := parseCall(args)
	if err != nil {
		return errcode.Exit(os.Stderr, errcode.Usagef(errcode.Usage, "%v", err), errcode.Usage)
	}
	if a.help {
		fmt.Print(callUsage)
		if a.fn != "" {
			describe(a)
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout+2*time.Second)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, min(a.timeout, 5*time.Second))
	defer dcancel()
	w, err := protocol.Connect(dctx, protocol.Config{URL: a.url, Name: "iii-cli:call", Namespace: protocol.DefaultNamespace,
		Token: userToken(a), NoReconnect: true})
	if err != nil {
		return errcode.Exit(os.Stderr, errcode.New(errcode.EngineUnreachable, "no engine answered at %s (%v). Is the engine running at that address and port?", a.url, err), errcode.Unknown)
	}
	defer w.Close()
	var opts []protocol.CallOption
	opts = append(opts, protocol.WithTimeout(a.timeout))
	if a.namespace != nil {
		opts = append(opts, protocol.InNamespace(*a.namespace))
	}
	res, err := w.Call(ctx, a.fn, a.payload, opts...)
	if err != nil {
		var perr *protocol.Error
		if !errors.As(err, &perr) {
			return errcode.Exit(os.Stderr, errcode.New(errcode.CallFailed, "%w", err), errcode.CallFailed)
		}
		var buf bytes.Buffer
		if json.Indent(&buf, perr.Raw(), "", "  ") != nil {
			buf.Write(perr.Raw())
		}
		fmt.Fprintln(os.Stderr, buf.String())
		return 1
	}
	if string(res) == "null" {
		return 0
	}
	var buf bytes.Buffer
	if json.Indent(&buf, res, "", "  ") != nil {
		buf.Write(res)
	}
	fmt.Println(buf.String())
	return 0
}

// userToken is the token Compose recorded for this user, engine and namespace (package
// usertoken), when neither III_TOKEN_FILE nor III_TOKEN names one; "" when there is none.
func userToken(a *callArgs) string {
	ns := protocol.DefaultNamespace
	if a.namespace != nil {
		ns = *a.namespace
	}
	return usertoken.ForCLI(a.url, ns, os.Stderr)
}

// describe prints what the running engine knows about a.fn; silent when no engine answers.
func describe(a *callArgs) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: a.url, Name: "iii-cli:call", Namespace: protocol.DefaultNamespace, NoReconnect: true})
	if err != nil {
		return
	}
	defer w.Close()
	ns := protocol.DefaultNamespace
	if a.namespace != nil {
		ns = *a.namespace
	}
	out, err := w.Call(ctx, protocol.FnListFunctions, map[string]string{"namespace": ns})
	if err != nil {
		return
	}
	var res struct {
		Functions []struct {
			FunctionID     string          `json:"function_id"`
			Description    string          `json:"description"`
			RequestFormat  json.RawMessage `json:"request_format"`
			ResponseFormat json.RawMessage `json:"response_format"`
		} `json:"functions"`
	}
	_ = json.Unmarshal(out, &res)
	for _, f := range res.Functions {
		if f.FunctionID != a.fn {
			continue
		}
		fmt.Printf("\n%s (namespace %s, engine %s)\n", f.FunctionID, ns, a.url)
		if f.Description != "" {
			fmt.Printf("  %s\n", f.Description)
		}
		for _, s := range []struct {
			name string
			raw  json.RawMessage
		}{{"request", f.RequestFormat}, {"response", f.ResponseFormat}} {
			var buf bytes.Buffer
			if len(s.raw) > 0 && string(s.raw) != "null" && json.Indent(&buf, s.raw, "  ", "  ") == nil {
				fmt.Printf("  %s format: %s\n", s.name, buf.String())
			}
		}
		return
	}
	fmt.Printf("\n%s is not registered in namespace %s at %s\n", a.fn, ns, a.url)
}
