package main

import (
	"os"

	"github.com/weft-hpc/weft/internal/launch"
)

func main() { os.Exit(launch.Main(os.Args)) }
