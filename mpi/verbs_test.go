package mpi_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/weft-hpc/weft/mpi"
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
	w, err := mpi.InitWith(mpi.Options{Transport: "verbs"})
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
	w, err := mpi.InitWith(mpi.Options{Transport: "verbs", VerbsDevices: []string{"nosuch0"}})
	if err == nil {
		w.Finalize()
		t.Fatal("InitWith verbs on device nosuch0 succeeded")
	}
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "nosuch0 (WEFT_VERBS_DEVICE)") {
		t.Fatalf("InitWith verbs on nosuch0: %v; want ErrNoDevice naming the device and WEFT_VERBS_DEVICE", err)
	}
}

// TestInitAutoVerbsFallsBack: built with the device, on a host where no
// RDMA device opens (the case of every host but the VM), auto keeps UDP:
// the rank publishes that it could not, and the job runs over UDP. In the
// VM, where rxe devices open, auto takes verbs instead (mpitest.sh).
func TestInitAutoVerbsFallsBack(t *testing.T) {
	if !verbs.Built {
		t.Skip("built without -tags verbs: auto never tries verbs")
	}
	if ents, _ := os.ReadDir("/sys/class/infiniband"); len(ents) > 0 {
		t.Skip("this host has RDMA devices: auto may pick verbs here")
	}
	singleton(t)
	w, err := mpi.InitWith(mpi.Options{Transport: "auto"})
	if err != nil {
		t.Fatalf("InitWith auto on a host without RDMA devices: %v", err)
	}
	defer w.Finalize()
	if ds := w.Stats().Devices; len(ds) != 1 || ds[0].Name != "udp" {
		t.Fatalf("auto opened %+v, want the UDP device", ds)
	}
}
