// Command gorun launches the ranks of a weft program. All of its logic lives
// in internal/launch; see `gorun -h` and shared/API.md.
package main

import (
	"os"

	"github.com/weft-hpc/weft/internal/launch"
)

func main() { os.Exit(launch.Main(os.Args)) }
