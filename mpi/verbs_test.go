package mpi

import (
	"errors"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/transport/verbs"
)

// singleton clears the process manager's variables, so that Init makes a
// job of one rank.
func singleton(t *testing.T) {
	t.Helper()
	for _, v := range []string{"PMI_FD", "PMI_PORT", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "GORUN_KVS"} {
		t.Setenv(v, "")
	}
}

// TestInitVerbsNotBuilt: without -tags verbs, WEFT_TRANSPORT=verbs fails
// Init with an error naming the variable and how to build the device.
func TestInitVerbsNotBuilt(t *testing.T) {
	if verbs.Built {
		t.Skip("built with -tags verbs")
	}
	singleton(t)
	w, err := InitWith(Options{Transport: "verbs"})
	if err == nil {
		w.Finalize()
		t.Fatal("InitWith verbs succeeded in a build without the verbs device")
	}
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WEFT_TRANSPORT=verbs") ||
		!strings.Contains(err.Error(), "-tags verbs and libibverbs-dev") {
		t.Fatalf("InitWith verbs: %v; want ErrUnsupported naming WEFT_TRANSPORT and -tags verbs", err)
	}
}

// TestInitVerbsNoDevice: built with the device but on a host without RDMA
// devices (the VM's MPI jobs, transport/verbs/mpitest.sh, run it where
// there are), Init fails with verbs' explanation, naming the device asked
// for.
func TestInitVerbsNoDevice(t *testing.T) {
	if !verbs.Built {
		t.Skip("built without -tags verbs")
	}
	singleton(t)
	w, err := InitWith(Options{Transport: "verbs", VerbsDevices: []string{"nosuch0"}})
	if err == nil {
		w.Finalize()
		t.Fatal("InitWith verbs on device nosuch0 succeeded")
	}
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "nosuch0 (WEFT_VERBS_DEVICE)") {
		t.Fatalf("InitWith verbs on nosuch0: %v; want ErrNoDevice naming the device and WEFT_VERBS_DEVICE", err)
	}
}
