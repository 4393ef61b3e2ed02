// Command gorun launches the ranks of a weft program. All of its logic lives
// in internal/launch; see `gorun -h` and shared/API.md.
package main
