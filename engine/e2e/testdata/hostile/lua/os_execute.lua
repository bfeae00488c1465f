-- want: lua/os_execute.lua:2: 'os' is not available
os.execute("touch " .. ctx.vars.outside .. "/pwned")
