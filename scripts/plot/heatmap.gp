# heatmap.gp — a value over a grid of two knobs. Rows of the data file are
# (x index, y index, value); the preamble sets the tic labels. Each cell shows
# its value, so the best cell can be read, not guessed from a colour.
load tpldir.'/style.gp'
set grid noxtics noytics
set palette defined (0 "#f7fbff", 0.35 "#9ecae1", 0.7 "#3182bd", 1 "#08306b")
unset key
set view map
PLOT = 'plot datafile using 1:2:3 with image notitle, '.\
       'datafile using 1:2:(sprintf("%.4g", $3)) with labels font ",10" tc rgb "#c00000" notitle'
if (want_png) { @png_term; set output outbase.'.png'; @PLOT; unset output }
if (want_svg) { @svg_term; set output outbase.'.svg'; @PLOT; unset output }
