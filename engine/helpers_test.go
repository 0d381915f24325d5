package engine

import (
	"encoding/json"
	"syscall"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

type kubeletImage = kubeletsim.Image

var jsonUnmarshal = json.Unmarshal

func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }
