package daemon

import (
	"context"
	"os"

	"github.com/iii-go/iii/compose/project"
)

// ListProject is one project of the compose::list reply.
type ListProject struct {
	Namespace  string              `json:"namespace"`
	File       string              `json:"file"`
	StateDir   string              `json:"state_dir"`
	Containers []project.Container `json:"containers"`
}

// ListReply is the reply of compose::list: the daemon and the projects it runs (one here).
type ListReply struct {
	Daemon          string        `json:"daemon"`
	DaemonNamespace string        `json:"daemon_namespace"`
	DaemonPID       int           `json:"daemon_pid"`
	Projects        []ListProject `json:"projects"`
}

func (d *Daemon) list(_ context.Context, _ Request) (any, error) {
	return ListReply{Daemon: "compose", DaemonNamespace: d.Namespace, DaemonPID: os.Getpid(),
		Projects: []ListProject{{Namespace: d.Project.Namespace(), File: d.Project.File().Path, StateDir: d.Project.StateDir(), Containers: d.Project.Status()}}}, nil
}
