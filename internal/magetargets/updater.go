package magetargets

import (
	"fmt"
	"os/exec"

	"github.com/magefile/mage/sh"
)

// shellScripts are the shell scripts that ship; each must be POSIX sh and shellcheck-clean.
var shellScripts = []string{"updater/install.sh"}

// Shellcheck checks every shipped shell script with shellcheck as POSIX sh (Debian: shellcheck).
func Shellcheck() error {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		return fmt.Errorf("shellcheck is not installed (Debian: apt-get install shellcheck; `go tool mage setup` installs it as root)")
	}
	args := append([]string{"--shell=sh", "--severity=style"}, shellScripts...)
	return sh.RunV("shellcheck", args...)
}
