module example.invalid/kubewasm/plugins

go 1.24

require example.invalid/kubewasm/sdk v0.0.0

replace example.invalid/kubewasm/sdk => ../../plugin-sdk/go
