module example.invalid/kubewasm/sdk

go 1.24
