package daemon

import (
	"time"

	"github.com/iii-go/iii/compose/project"
)

// Operation states.
const (
	OpAccepted   = "accepted"
	OpRunning    = "running"
	OpSucceeded  = "succeeded"
	OpFailed     = "failed"
	OpCancelling = "cancelling"
	OpCancelled  = "cancelled"
)

// Step is one stage of an operation.
type Step struct {
	Name   string `json:"name"`
	State  string `json:"state"` // running, done, failed, cancelled, rolled_back
	Detail string `json:"detail,omitempty"`
}

// Progress counts an operation's steps.
type Progress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// Operation is the snapshot compose::operation returns of an add, remove or update.
type Operation struct {
	OperationID string             `json:"operation_id"`
	Function    string             `json:"function"`
	Requested   []string           `json:"requested"`
	State       string             `json:"state"`
	Steps       []Step             `json:"steps"`
	Progress    Progress           `json:"progress"`
	Result      any                `json:"result,omitempty"`
	Error       *project.CodedBody `json:"error,omitempty"`
	StartedAt   time.Time          `json:"started_at"`
	EndedAt     *time.Time         `json:"ended_at,omitempty"`
}
