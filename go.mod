module github.com/mhalab/mha

go 1.26
