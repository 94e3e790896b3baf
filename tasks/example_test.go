package tasks_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/mhalab/mha/tasks"
)

// Example prints a sort sequence: each position's token and, where scored, the target and the
// positions the ground-truth attention D reads.
func Example() {
	task, err := tasks.New("sort", tasks.Config{SeqLen: 8, Vocab: 6})
	if err != nil {
		log.Fatal(err)
	}
	b, err := task.Batch(1, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Describe())
	for t := range b.T {
		line := fmt.Sprintf("%d %s", t, task.Symbol(b.Tokens[t]))
		if b.Scored[t] {
			var reads []string
			for k, w := range b.Attn[t*b.T : (t+1)*b.T] {
				if w > 0 {
					reads = append(reads, fmt.Sprintf("%d:%.2f", k, w))
				}
			}
			line = fmt.Sprintf("%-5s → %s  D %s", line, task.Symbol(b.Targets[t]), strings.Join(reads, " "))
		}
		fmt.Println(line)
	}
	// Output:
	// sort: 4 values from 0 to 4, SEP, then the values in ascending order
	// 0 0
	// 1 0
	// 2 3
	// 3 4
	// 4 SEP → 0  D 0:1.00 1:1.00
	// 5 0   → 0  D 0:1.00 1:1.00
	// 6 0   → 3  D 2:1.00
	// 7 3   → 4  D 3:1.00
}
