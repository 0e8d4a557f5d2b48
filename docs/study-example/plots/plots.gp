set terminal pngcairo size 900,600
set key top right
set grid
set output 'loss.png.tmp'
set logscale xy
set xlabel 'non-embedding parameters'
set ylabel 'held-out loss (nats/token)'
set title 'Held-out loss against size (fits: loss = e^a N^b)'
f0(x) = exp(3.58969221 + -0.154800049 * log(x))
f1(x) = exp(3.40339482 + -0.145340959 * log(x))
plot 'loss.dat' index 0 using 2:3 with points pt 7 lc 1 title 'DIFF', 'loss.dat' index 1 using 2:3 with points pt 6 lc 2 title 'Transformer', f0(x) with lines lc 1 title 'DIFF fit', f1(x) with lines lc 2 title 'Transformer fit'
set output 'position.png.tmp'
unset logscale
set xlabel 'position in the context'
set title 'Held-out loss by position (s4)'
plot 'position.dat' using 1:2 with linespoints lc 1 title 'DIFF', 'position.dat' using 1:3 with linespoints lc 2 title 'Transformer'
