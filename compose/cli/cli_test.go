package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

func TestFlagRules(t *testing.T) {
	cases := []struct {
		args []string
		code string
	}{
		{[]string{"-f", "x.yaml"}, errcode.FileRequiresUp},
		{[]string{"--file=x.yaml", "--engine", "ws://h:1"}, errcode.FileRequiresUp},
		{[]string{"--frozen"}, errcode.FrozenRequiresUp},
		{[]string{"build", "--up"}, errcode.BuildConflictsWithServeOptions},
		{[]string{"build", "-n", "shop"}, errcode.BuildConflictsWithServeOptions},
		{[]string{"build", "--engine=ws://h:1"}, errcode.BuildConflictsWithServeOptions},
		{[]string{"--up", "--namespace", "Bad"}, errcode.InvalidNamespace},
		{[]string{"--up", "--nope"}, errcode.UsageError},
		{[]string{"--engine"}, errcode.UsageError},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), "test", c.args, &out, &errb, os.LookupEnv)
		if code == 0 || !strings.HasPrefix(errb.String(), "error["+c.code+"]: ") {
			t.Errorf("%v: exit %d, stderr %q; want error[%s]", c.args, code, errb.String(), c.code)
		}
	}
	o, err := parse([]string{"build", "-f", "a.yaml", "--frozen"})
	if err != nil || !o.build || !o.frozen || o.file != "a.yaml" || o.check() != nil {
		t.Fatalf("build flags: %+v %v", o, err)
	}
	o, err = parse([]string{"--engine=ws://h:1", "-n", "shop", "--up", "--file=b.yaml"})
	if err != nil || o.engine != "ws://h:1" || o.namespace != "shop" || !o.up || o.file != "b.yaml" || o.check() != nil {
		t.Fatalf("daemon flags: %+v %v", o, err)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"build", "-h"}, {"--up", "help"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), "test", args, &out, &errb, os.LookupEnv); code != 0 || !strings.Contains(out.String(), "iii compose build [-f FILE] [--frozen]") {
			t.Errorf("%v: exit %d, %q", args, code, out.String())
		}
	}
}
