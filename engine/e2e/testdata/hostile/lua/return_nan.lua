-- want: value: cannot encode NaN
return 0/0
