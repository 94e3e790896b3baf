//go:build !race

package pretrained

// raceDetector is set when the tests run with -race, whose shadow memory makes resident-memory
// measurements meaningless.
const raceDetector = false
